"""Where the parked vchannels of one pchannel partition stand, together (driver).

Most of an idle cycle's vchannels read nothing of their own: only TimeTicks and other
vchannels' messages, which move their checkpoints and nothing else. Moving each of them on its
own (planning its position, making its routing row, advancing its state) is most of what an
idle cycle costs the driver (``deltanode_bench.idle_cycle`` measures it, ``pipeline.parking``).
A vchannel in that state is *parked* on its partition's cursor instead
(``VchannelFlowgraph.park``): a cycle moves the cursor once per range read, and the vchannel's
own state catches up with it, in one batch, when anything reads or changes it
(``VchannelFlowgraph.working``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

# A cursor's member: a vchannel's flowgraph. A type parameter, so that this module does not
# import the flowgraph's, which imports this one.
M = TypeVar("M")


@dataclass(eq=False)
class TickCursor(Generic[M]):
    """Runs on the driver, in the pipeline's loop thread."""

    pchannel: str
    partition: int
    offset: int                      # where every parked vchannel's next read starts
    tick: int = 0                    # the last TimeTick the cursor's reads saw (0: none)
    tick_offset: int = -1            # and its offset
    read_size: float | None = None   # bytes per message of its last read
    message_size: float = 0.0        # the largest of its members' own sizes when they parked (plan.planning_sizes)
    wake_ms: float = float("inf")    # a member's seal policy may be due once a tick reaches this clock
    members: dict[str, M] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return self.pchannel, self.partition

    def join(self, vchannel: str, member: M, message_size: float | None, wake_ms: float) -> None:
        """``member`` follows the cursor from where it stands: ``message_size``, its own bytes per
        message (None: unknown), and ``wake_ms``, the clock at which its seal policies may be due."""
        assert vchannel not in self.members, "a released flowgraph of the same name is forgotten first"
        self.message_size = max(self.message_size, message_size or 0.0)
        self.wake_ms = min(self.wake_ms, wake_ms)
        self.members[vchannel] = member

    def leave(self, vchannel: str, member: M) -> None:
        """``member`` no longer follows the cursor (a flowgraph of the same name watched since stays)."""
        if self.members.get(vchannel) is member:
            del self.members[vchannel]

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
