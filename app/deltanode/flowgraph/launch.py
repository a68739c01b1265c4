"""Start one flowgraph (one Spark streaming query) for a vchannel.

Delta is the truth about how far a channel got: when the channel has committed before,
the flowgraph starts at its insert_log ``txn`` (exact offset) whatever the VchannelInfo
says, since a VchannelInfo may be older than the last commit of the previous owner. Spark's
own checkpoint directory is scratch, fresh for every start.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ..logs import deltanode_level
from ..storage import meta
from ..storage.channel_state import DROPPED, FLUSHED, GROWING, ChannelState, SegmentMeta
from ..storage.layout import StorageLayout
from ..wire.datapb import VchannelInfo
from ..wire.names import check_safe, pchannel_of
from ..wire.positions import kafka_offset
from .replay_filter import ReplayFilter
from .sink import BinlogSink
from .source import VchannelSource
from .spec import FlowgraphSpec, save_state

log = logging.getLogger(__name__)
# One query start at a time per process: the channel watcher starts flowgraphs from one
# thread per vchannel, and planning two streaming queries on one session at once can corrupt
# session state (seen once: every later task failed with java.io.OptionalDataException).
_START_LOCK = threading.Lock()


# Defaults a flowgraph session needs, unless the conf sets them. A flowgraph row is a whole
# Milvus message (MBs of Arrow payload): Arrow batches of 2 rows from the JVM to the sink keep
# the JVM from assembling one huge vector per task (measured on a 930 MB backlog of 768-dim
# inserts: 84 vs 75 MB/s, JVM peak RSS 592 vs 1007 MiB, against the default of 10,000 rows).
#
# Spark's scratch checkpoint (offset and commit logs) through the Hadoop FileSystem API: the
# default FileContext manager's rename forks a `readlink` process per file on a local disk
# (Hadoop without its native library), twice per micro-batch.
SESSION_DEFAULTS = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "2",
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}


def prepare_spark(spark: SparkSession) -> None:
    """Register the flowgraph's data sources and apply SESSION_DEFAULTS the conf leaves unset."""
    spark.dataSource.register(VchannelSource)
    spark.dataSource.register(BinlogSink)
    configured = spark.sparkContext.getConf()
    for key, value in SESSION_DEFAULTS.items():
        if not configured.contains(key):
            spark.conf.set(key, value)


def _segments_from_info(info: VchannelInfo) -> dict[int, SegmentMeta]:
    segs: dict[int, SegmentMeta] = {}
    for state, infos, ids in ((GROWING, info.unflushedSegments, info.unflushedSegmentIds),
                              (FLUSHED, info.flushedSegments, info.flushedSegmentIds),
                              (DROPPED, info.dropped_segments, info.dropped_segmentIds)):
        for s in infos:
            segs[s.ID] = SegmentMeta(s.ID, s.partitionID, state, s.num_of_rows,
                                     dml_ts=s.dml_position.timestamp if s.HasField("dml_position") else 0,
                                     start_ts=s.start_position.timestamp if s.HasField("start_position") else 0)
        for seg_id in ids:
            segs.setdefault(seg_id, SegmentMeta(seg_id, -1, state))
    return segs


def initial_state(storage: StorageLayout, info: VchannelInfo, node_id: int = 0) -> ChannelState:
    """The state a flowgraph starts from: Delta's if the channel committed before, else the VchannelInfo's.

    The replay filter covers the segments whose data may lie beyond the start position: all of
    the VchannelInfo's when starting from its seek position, only those Delta does not know when
    resuming at Delta's exact offset (nothing after it is persisted for the others, and their
    ``dml_ts``, the largest committed EndTs, is not tick-aligned like a Milvus dml position: a
    later message of a segment may carry a smaller ts, which the filter would drop).
    """
    vchannel = check_safe("vchannel", info.channelName)
    state = meta.channel_state(storage, info.collectionID, vchannel)
    if state is None:
        seek = info.seek_position
        state = ChannelState(vchannel=vchannel, collection_id=info.collectionID, pchannel=pchannel_of(vchannel),
                             checkpoint_offset=kafka_offset(seek.msgID) if seek.msgID else 0,
                             checkpoint_ts=seek.timestamp, seek_ts=seek.timestamp,
                             segments=_segments_from_info(info))
        replayed = list(state.segments.values())
    else:
        state.seek_ts = 0  # an exact offset from our own commit: nothing before it to skip
        replayed = [seg for seg_id, seg in _segments_from_info(info).items() if seg_id not in state.segments]
        state.segments.update((seg.segment_id, seg) for seg in replayed)
    replay = ReplayFilter({s.segment_id: s.dml_ts for s in replayed if s.state == FLUSHED},
                          {s.segment_id: s.dml_ts for s in replayed if s.state == GROWING})
    state.replay = replay.to_json() if replay.active else None
    state.node_id = node_id
    return state


def start_flowgraph(spark: SparkSession, storage: StorageLayout, info: VchannelInfo, schema_b64: str, *,
                    bootstrap: str, scratch_dir: str, trigger_interval: str = "1 second",
                    max_messages: int = 200, max_bytes: int = 256 << 20, splits: int = 2,
                    handoff_dir: str | None = None, node_id: int = 0,
                    checkpoint_interval_ms: int = 10_000,
                    fence: dict | None = None) -> StreamingQuery:
    state = initial_state(storage, info, node_id)
    run_dir = os.path.join(scratch_dir, check_safe("vchannel", state.vchannel), uuid.uuid4().hex[:12])
    context_file = os.path.join(run_dir, "state.json")
    save_state(context_file, state)
    spec = FlowgraphSpec(
        vchannel=state.vchannel, pchannel=state.pchannel, collection_id=state.collection_id,
        schema_b64=schema_b64, bootstrap=bootstrap, storage_root=storage.root, context_file=context_file,
        start_offset=state.checkpoint_offset, max_messages=max_messages, max_bytes=max_bytes, splits=splits,
        checkpoint_interval_ms=checkpoint_interval_ms,
        partition=state.partition,
        delete_watermark=meta.table_watermark(storage.delta_log(state.collection_id), state.vchannel),
        quarantine_watermark=meta.table_watermark(storage.quarantine(), state.vchannel), fence=fence,
        handoff_dir=handoff_dir, log_level=deltanode_level())
    option = spec.to_option()
    with _START_LOCK:
        query = _start_query(spark, option, os.path.join(run_dir, "spark"), trigger_interval, state.vchannel)
    query.deltanode_run_dir = run_dir  # type: ignore[attr-defined]
    log.info("%s: flowgraph starts at offset %d (ts %d), %d segments known, replay filter %s",
             state.vchannel, state.checkpoint_offset, state.checkpoint_ts, len(state.segments),
             "active" if state.replay else "idle")
    return query


def _start_query(spark: SparkSession, option: str, checkpoint: str, trigger_interval: str,
                 name: str) -> StreamingQuery:
    # The channel watcher starts flowgraphs from its own threads; Spark's active session is
    # per JVM thread, and the sink lookup needs it to find our registered data sources.
    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
    return (spark.readStream.format(VchannelSource.name()).option("spec", option).load()
            .writeStream.format(BinlogSink.name()).option("spec", option)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=trigger_interval).queryName(name).start())


def discard_run_dir(query: StreamingQuery) -> None:
    run_dir = getattr(query, "deltanode_run_dir", None)
    if run_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
