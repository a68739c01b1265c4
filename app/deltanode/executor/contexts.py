"""A task's routing contexts, looked up by vchannel (runs on executors).

The driver sends them as columns (``records.RouteContexts``); a range needs, for each of its
vchannels, only where it starts (and, for a drop or a flush, its collection), and a
``RouteContext`` only for the vchannels a message comes for or that need every tick.
"""

from __future__ import annotations

from ..records import ReadRange, RouteContext, RouteContexts


class TaskContexts:
    """The routing contexts of one task's vchannels, shared by its ranges' dispatchers."""

    def __init__(self, packed: RouteContexts) -> None:
        self.packed = packed
        self._index = {v: i for i, v in enumerate(packed.vchannels)}
        # Routers that need every TimeTick (seeking, or replay filter active): made at once.
        self.ticked = frozenset(v for v, seek_ts, replay in zip(packed.vchannels, packed.seek_ts, packed.replays)
                                if seek_ts > 0 or replay is not None)

    @classmethod
    def of(cls, contexts: list[RouteContext]) -> TaskContexts:
        return cls(RouteContexts.of(contexts))

    def start(self, vchannel: str) -> int:
        return self.packed.starts[self._index[vchannel]]

    def collection(self, vchannel: str) -> tuple[int, str]:
        """The vchannel's collection: its id and name."""
        i = self._index[vchannel]
        return self.packed.collection_ids[i], self.packed.collection_names[i]

    def context(self, vchannel: str, piece: ReadRange) -> RouteContext:
        """The vchannel's RouteContext, for its range ``piece``."""
        return self.packed.context(self._index[vchannel], piece.pchannel, piece.partition)
