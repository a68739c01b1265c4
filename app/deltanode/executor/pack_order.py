"""The order in which Milvus's DataNode sees a pchannel's messages: packs cut at TimeTicks.

Milvus's flowgraph does not read its pchannel in log order. Its timetick stream
(``MqTtMsgStream.bufMsgPackToChannel``) buffers what it reads up to a TimeTick at ts T and
hands over one pack: the buffered messages whose EndTs <= T, in buffer order; the others stay
in the buffer, ahead of the messages read next, for a later pack. A message whose EndTs is past
the tick that follows it in the log (two proxies writing one pchannel) is thus seen after
messages that follow it. The replay filter is order-dependent (replay_filter.py), so while it
is active a vchannel's router applies messages in this order (docs/milvus-facts.md §3); outside
the replay window the order changes nothing DeltaNode decides.

Pure logic; runs on executors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Apply = Callable[[], None]


@dataclass
class PackOrder:
    """Messages held until a TimeTick releases them: ``(end_ts, apply)`` in buffer order."""

    held: list[tuple[int, Apply]] = field(default_factory=list)

    def add(self, end_ts: int, apply: Apply) -> None:
        self.held.append((end_ts, apply))

    def release(self, tick_ts: int) -> list[Apply]:
        """The pack of a TimeTick at ``tick_ts``: the held messages with EndTs <= ``tick_ts``."""
        pack = [apply for end_ts, apply in self.held if end_ts <= tick_ts]
        self.held = [(end_ts, apply) for end_ts, apply in self.held if end_ts > tick_ts]
        return pack

    def release_all(self) -> list[Apply]:
        pack = [apply for _, apply in self.held]
        self.held = []
        return pack

    @property
    def holding(self) -> bool:
        return bool(self.held)
