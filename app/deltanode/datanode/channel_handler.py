"""The DataNode's channel handler: MEP 7 watches and releases become pipeline membership.

Each owned vchannel is a logical flowgraph inside the node's one shared pipeline
(``pipeline.Pipeline``); watching one adds it between two cycles, releasing one removes it.
Nothing else starts or stops. ``progress`` gives the figures of the periodic reports.
"""

from __future__ import annotations

from collections.abc import Callable

from ..pipeline.pipeline import Pipeline
from ..wire.datapb import ChannelWatchInfo
from ..wire.names import check_safe, pchannel_of


class FlowgraphManager:
    """The ``ChannelHandler`` the channel watcher drives."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def watch(self, info: ChannelWatchInfo, progressed: Callable[[], None]) -> None:
        vchannel = check_safe("vchannel", info.vchan.channelName)
        if not info.HasField("schema") or not info.schema.fields:
            raise ValueError(f"ChannelWatchInfo for {vchannel} carries no collection schema")
        self.pipeline.remove(vchannel)
        progressed()
        self.pipeline.add(info.vchan, info.schema, progressed)

    def release(self, vchannel: str) -> None:
        self.pipeline.remove(vchannel)

    def owned(self) -> list[str]:
        return self.pipeline.vchannels()

    def progress(self) -> list[dict]:
        """Per vchannel: status, committed checkpoint, rows, batches and lag behind the broker."""
        rows = []
        for s in self.pipeline.snapshots():
            row = {"vchannel": s.vchannel, "status": s.status, "failures": s.failures, "last_error": s.last_error}
            if s.checkpoint_offset is not None:
                high = self.pipeline.high_watermark(pchannel_of(s.vchannel))
                row.update(checkpoint_offset=s.checkpoint_offset, checkpoint_ts=s.checkpoint_ts,
                           rows_committed=s.rows_committed, batches=s.batches,
                           lag_messages=None if high is None else max(0, high - s.checkpoint_offset))
            rows.append(row)
        return rows
