"""A vchannel's routing row for each cycle's tasks (``RouteRow``), its kept part made again only
when what it is made from changes."""

from __future__ import annotations

from ..records import RouteKept, RouteRow
from ..state.channel_state import ChannelState
from ..state.commit import Watermarks


class RouteRows:
    """Runs on the driver; the pipeline's loop thread calls it: ``row`` through ``VchannelFlowgraph.route_row``,
    ``at`` for a parked flowgraph (``Parking.rows``)."""

    # Slots: a node holds 10,000 flowgraphs, each with its rows (``deltanode_bench.idle_cycle``).
    __slots__ = ("vchannel", "collection_id", "collection_name", "_key", "kept", "tick")

    def __init__(self, vchannel: str, collection_id: int, collection_name: str) -> None:
        self.vchannel, self.collection_id, self.collection_name = vchannel, collection_id, collection_name
        self._key: tuple | None = None            # what ``kept`` was made from
        self.kept: RouteKept | None = None        # the last row's, which a parked flowgraph's rows share
        self.tick = 0                             # the last row's TimeTick before its start

    def row(self, state: ChannelState, watermarks: Watermarks) -> RouteRow:
        """The row of ``state`` and ``watermarks``. Only the start offset and the TimeTick before it
        move from cycle to cycle for most vchannels, and rows are made for every readable vchannel
        every cycle: the rest is made again only when the state's segments, dropped partitions,
        replay filter, seek, flush or the watermarks are other objects or values (a state is never
        changed in place: every change copies it first)."""
        key = (state.segments, state.dropped_partitions, state.replay, state.seek_ts, state.flush_ts,
               state.collection_dropped, watermarks)
        kept = self.kept
        if kept is None or key != self._key:   # the same objects compare at once; equal ones make the same row
            self._key = key
            kept = self.kept = RouteKept(
                vchannel=self.vchannel, collection_id=self.collection_id, collection_name=self.collection_name,
                seek_ts=state.seek_ts, dropped_segments=frozenset(state.dropped_segments()) or None,
                dropped_partitions=frozenset(state.dropped_partitions) or None,
                collection_dropped=state.collection_dropped, replay=state.replay,
                delete_watermark=watermarks.delete or 0, quarantine_watermark=watermarks.quarantine or 0,
                flush_ts=state.flush_ts, sealed=state.sealed_segments() or None)
        self.tick = state.checkpoint_ts
        return RouteRow(state.checkpoint_offset, kept, self.tick)   # positional: made for every readable vchannel

    def at(self, offset: int, tick: int = 0) -> RouteRow:
        """The last row, starting at ``offset`` after the TimeTick ``tick`` (0: none read since the
        last row, whose own then stands): a parked flowgraph's, which starts at its cursor's offset
        while nothing else of its row changes (a change unparks it)."""
        kept = self.kept
        assert kept is not None, "a flowgraph's row is made before it parks"
        return RouteRow(offset, kept, max(tick, self.tick))
