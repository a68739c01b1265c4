"""The flowgraph's sink: executors write binlogs, the driver commits each batch to Delta."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..faults import crash_point
from ..logs import ensure_logging
from ..storage.binlog_writer import BinlogWriter, TaskResult
from ..storage.commit import commit_batch, discard
from .spec import FlowgraphSpec, StateFile, save_state
from .task_memory import release_task_memory

log = logging.getLogger("deltanode.sink")


@dataclass
class BinlogMessage(WriterCommitMessage):
    result: TaskResult


class BinlogSink(DataSource):
    """``df.writeStream.format("deltanode_binlog").option("spec", FlowgraphSpec.to_option())``."""

    @classmethod
    def name(cls) -> str:
        return "deltanode_binlog"

    def streamWriter(self, schema, overwrite: bool) -> "BinlogStreamWriter":
        return BinlogStreamWriter(FlowgraphSpec.from_option(self.options["spec"]))


class BinlogStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, spec: FlowgraphSpec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BinlogMessage:
        crash_point("before_binlog_write")
        spec, storage = self.spec, self.spec.storage
        writer = BinlogWriter(storage.insert_log(spec.collection_id), storage.delta_log(spec.collection_id),
                              storage.quarantine(), spec.layout.insert_schema(), spec.layout.delete_schema())
        for batch in iterator:
            writer.add(batch)
        result = writer.close()
        release_task_memory()
        return BinlogMessage(result)

    def commit(self, messages: list[BinlogMessage], batchId: int) -> None:
        crash_point("after_binlog_write")
        spec = self.spec
        ensure_logging(spec.log_level)
        state = StateFile(spec.context_file).load()
        results = [m.result for m in messages if m is not None]
        done = commit_batch(spec.storage, state, results, spec.layout.insert_schema(),
                            spec.layout.delete_schema(), fence=spec.make_fence(),
                            coalesce_ms=spec.checkpoint_interval_ms)
        crash_point("after_commit")
        save_state(spec.context_file, done.state)
        if done.coalesced is not None:
            return
        o = done.outcome
        log.info("%s batch %d [%d, %d): %d rows, %d deletes, %d quarantined, %.1f MB (%d payloads handed off), "
                 "commit %.3f s%s", spec.vchannel, batchId, o.start, o.end, o.inserted_rows, o.deleted_rows,
                 o.quarantined, o.wire_bytes / 1e6, o.handed_off, done.seconds,
                 "" if done.committed else " (already committed)")

    def abort(self, messages: list[BinlogMessage], batchId: int) -> None:
        files = [f for m in messages if m is not None for f in m.result.files]
        discard(self.spec.storage, self.spec.collection_id, files)
