"""Where the parked vchannels of one pchannel partition stand, together (driver).

At 10,000 vchannels most of a cycle's vchannels read nothing of their own: only TimeTicks and
other vchannels' messages, which move their checkpoints and nothing else. Moving each of them
(planning its position, making its routing row, advancing its state) cost an idle cycle
176-187 ms of the driver's CPU, against 60-64 ms parked (``deltanode_bench.idle_cycle``,
``pipeline.parking``). A vchannel in that state is
*parked* on its partition's cursor instead (``VchannelFlowgraph.park``): a cycle moves the
cursor once per range read, and the vchannel's own state catches up with it, in one batch,
when anything reads or changes it (``VchannelFlowgraph.working``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .vchannel import VchannelFlowgraph


@dataclass(eq=False)
class TickCursor:
    """Runs on the driver, in the pipeline's loop thread."""

    pchannel: str
    partition: int
    offset: int                      # where every parked vchannel's next read starts
    tick: int = 0                    # the last TimeTick the cursor's reads saw (0: none)
    tick_offset: int = -1            # and its offset
    read_size: float | None = None   # bytes per message of its last read
    message_size: float = 0.0        # the largest of its members' own sizes when they parked (plan.planning_sizes)
    wake_ms: float = float("inf")    # a member's seal policy may be due once a tick reaches this clock
    members: dict[str, VchannelFlowgraph] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return self.pchannel, self.partition

    def move(self, end: int, tick: int, tick_offset: int, read_size: float | None) -> None:
        """A read up to ``end``, from ``offset`` or before it, that none of the members had a
        message in; its last TimeTick ``tick`` at ``tick_offset`` (0 and -1: none)."""
        if tick and tick_offset >= self.offset:
            self.tick, self.tick_offset = tick, tick_offset
        self.offset = end
        if read_size:
            self.read_size = read_size

    def restart(self, offset: int) -> None:
        """No member left: the next vchannel parked starts it again at ``offset``."""
        self.offset, self.tick, self.tick_offset = offset, 0, -1
        self.message_size, self.wake_ms = 0.0, float("inf")
