"""Asking the broker for watermarks within a time bound, whatever its client does (driver).

The pipeline's loop asks the broker while a cycle's job runs and after it (``cycle``,
``read_stalls``) and must not wait longer than it means to: Kafka's client keeps the timeout it is
given, but Pulsar's waits its operation timeout (10 s) for each topic, and a probe of the broker
after a timeout. So the question runs on a thread of its own; the caller waits on its future as
long as it means to, and a late answer is dropped.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from ..mq.broker import BrokerError, HighWatermarks

__all__ = ["ask_highs"]

Answers = dict[tuple[str, int], int | BrokerError]


def ask_highs(watermarks: HighWatermarks, keys: list[tuple[str, int]], timeout: float) -> Future[Answers]:
    """``watermarks.highs(keys, timeout)`` on a daemon thread of its own: its answers, or what it raised."""
    answer: Future[Answers] = Future()

    def run() -> None:
        try:
            answer.set_result(watermarks.highs(keys, timeout))
        except BaseException as e:   # noqa: BLE001 - handed to whoever waits on the answer
            answer.set_exception(e)

    threading.Thread(target=run, name="deltanode-watermark-probe", daemon=True).start()
    return answer
