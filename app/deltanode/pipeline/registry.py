"""The vchannels this node's pipeline runs, and which of them the running cycle uses (driver).

Channel watchers add and remove vchannels from their own threads while the loop runs cycles;
a removal waits until no cycle uses the vchannel, so its files are never deleted under a task.
"""

from __future__ import annotations

import logging
import threading

from ..vchannel.flowgraph import Snapshot, VchannelFlowgraph

log = logging.getLogger(__name__)


class VchannelRegistry:
    """Any thread."""

    def __init__(self) -> None:
        self._members: dict[str, VchannelFlowgraph] = {}
        self._lock = threading.Lock()
        self._busy: set[str] = set()                 # vchannels of the running cycle
        self._idle = threading.Condition(self._lock)

    def add(self, fg: VchannelFlowgraph) -> None:
        with self._lock:
            self._members[fg.vchannel] = fg

    def remove(self, vchannel: str, timeout: float) -> VchannelFlowgraph | None:
        """Take ``vchannel`` out; returns once no cycle uses it (or after ``timeout``, with a warning)."""
        with self._idle:
            fg = self._members.pop(vchannel, None)
            if not self._idle.wait_for(lambda: vchannel not in self._busy, timeout):
                log.warning("%s: still in a cycle after %.0f s; removed anyway", vchannel, timeout)
        return fg

    def get(self, vchannel: str) -> VchannelFlowgraph | None:
        with self._lock:
            return self._members.get(vchannel)

    def members(self) -> dict[str, VchannelFlowgraph]:
        with self._lock:
            return dict(self._members)

    def begin_cycle(self) -> dict[str, VchannelFlowgraph]:
        """The members a cycle runs; a removal of one of them waits for ``end_cycle``."""
        with self._lock:
            self._busy = set(self._members)
            return dict(self._members)

    def end_cycle(self) -> None:
        with self._idle:
            self._busy = set()
            self._idle.notify_all()

    def still_members(self, members: dict[str, VchannelFlowgraph]) -> dict[str, VchannelFlowgraph]:
        """Those of ``members`` not removed (nor removed and added again) since."""
        with self._lock:
            return {v: fg for v, fg in self._members.items() if members.get(v) is fg}

    def vchannels(self) -> list[str]:
        with self._lock:
            return sorted(self._members)

    def snapshots(self) -> list[Snapshot]:
        return sorted((fg.snapshot() for fg in self.members().values()), key=lambda s: s.vchannel)

    def collection_ids(self) -> list[int]:
        return sorted({fg.collection_id for fg in self.members().values()})
