"""Per topic, since when the broker has answered its watermark requests without a break: what a
``HighWatermarks`` tells of one pchannel (``answered_since``) beside the node-wide outage.

The loader checks a pchannel topic's id at a vchannel's load (``pipeline.loader``): it skips the
check only for a topic the broker does not answer for now (the question would wait out its
timeout), and asks again, rather than reuse a cached id, for one that went unanswered after the id
was asked (the topic may have been deleted and created again meanwhile).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from .types import BrokerError, BrokerUnreachable

__all__ = ["TopicAnswers"]


class TopicAnswers:
    """Runs on the driver: fed each ``highs`` answer, read by the loader's threads (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[str, float | None] = {}   # topic -> answered since (monotonic); None: unanswered now

    def record(self, answers: Mapping[tuple[str, int], int | BrokerError]) -> None:
        """The broker's answers to one ``highs`` call: a topic with a partition it did not answer for
        (``BrokerUnreachable``) is unanswered from now; one answered again is answered from now."""
        unanswered = {topic for (topic, _), a in answers.items() if isinstance(a, BrokerUnreachable)}
        now = time.monotonic()
        with self._lock:
            for topic, _ in answers:
                if topic in unanswered:
                    self._since[topic] = None
                elif topic in self._since and self._since[topic] is None:
                    self._since[topic] = now

    def since(self, topic: str) -> float | None:
        """Monotonic time since which every watermark request of ``topic`` was answered (0.0: every
        one so far, or none asked yet); None while its last one went unanswered."""
        with self._lock:
            return self._since.get(topic, 0.0)
