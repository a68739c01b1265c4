"""Sealing a vchannel's Growing segments: for a flush request, and by the seal policies once they
may be due (worked out again only when its segments change)."""

from __future__ import annotations

from ..config.sections.pipeline import SealSettings
from ..wire.positions import physical_ms
from .batches import Batches
from .seal_policy import first_due_ms, seal_by_policies, seal_for_flush


class Sealing:
    """Runs on the driver; the pipeline's loop thread calls it, through ``VchannelFlowgraph.seal_due``
    and ``request_flush`` (which leave a cursor first: a sealed segment changes the state)."""

    # Slots: a node holds 10,000 flowgraphs, each with its sealing (``deltanode_bench.idle_cycle``).
    __slots__ = ("_segments", "_settings", "wake_ms")

    def __init__(self) -> None:
        self._segments: object = None              # the segments and settings ``wake_ms`` is of
        self._settings: SealSettings | None = None
        self.wake_ms = 0.0                          # no seal policy is due before this clock

    def for_flush(self, batches: Batches, flush_ts: int) -> bool:
        """Seal the working state's segments for a flush at ``flush_ts`` (once per request); whether it did."""
        sealed = seal_for_flush(batches.state, flush_ts) if batches.state is not None else None
        if sealed is not None:
            batches.state = sealed
        return sealed is not None

    def due(self, batches: Batches, settings: SealSettings) -> list[int]:
        """Seal the Growing segments of the working state a seal policy says are due; their ids.
        The policies run only once the clock reaches where one may be due (``seal_policy.first_due_ms``),
        which is worked out again when the segments or the settings are other objects (a state is
        never changed in place)."""
        state = batches.state
        if state is None:
            return []
        if self._segments is not state.segments or self._settings is not settings:
            self._segments, self._settings, self.wake_ms = state.segments, settings, first_due_ms(state, settings)
        if state.checkpoint_ts <= 0 or physical_ms(state.checkpoint_ts) < self.wake_ms:
            return []
        sealed = seal_by_policies(state, settings)
        if sealed is None:
            return []
        batches.state = sealed
        return [s for s, seg in sealed.segments.items() if seg.state != state.segments[s].state]
