"""The flowgraph's streaming source: one vchannel, read from its pchannel topic.

Planning (``latestOffset``/``partitions``) runs on the driver and touches only offsets;
``read`` runs on executors: consume the offset range, decode, filter, emit Arrow rows.
A batch is split into ``splits`` contiguous offset ranges so both cores work on one
vchannel, except while the replay filter is active (it is order-dependent).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from ..mq.kafka import BrokerError, Watermarks, read_range
from .handoff import Handoff
from .records import RECORD_SCHEMA, spark_ddl
from .route import Router
from .spec import FlowgraphSpec, StateFile
from .task_memory import release_task_memory


@dataclass
class RangePartition(InputPartition):
    first: int
    end: int
    state_json: str


class VchannelSource(DataSource):
    """``spark.readStream.format("deltanode_vchannel").option("spec", FlowgraphSpec.to_option())``."""

    @classmethod
    def name(cls) -> str:
        return "deltanode_vchannel"

    def schema(self) -> str:
        return spark_ddl(RECORD_SCHEMA)

    def streamReader(self, schema) -> "VchannelReader":
        return VchannelReader(FlowgraphSpec.from_option(self.options["spec"]))


def split_range(first: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[first, end)`` cut into at most ``parts`` contiguous, non-empty ranges."""
    n = end - first
    parts = max(1, min(parts, n))
    bounds = [first + (n * i) // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


# The largest message a Milvus producer sends (its Kafka producer's message.max.bytes,
# milvus-wire-facts.md). Until a channel has an average Insert/Delete size, a batch takes
# max_bytes // this many messages: a brand-new channel's first batch would otherwise take
# max_messages whatever their size (200 messages of 768-dim inserts are 620 MB against a
# 256m cap).
MAX_MESSAGE_BYTES = 10 << 20


class VchannelReader(DataSourceStreamReader):
    def __init__(self, spec: FlowgraphSpec) -> None:
        self.spec = spec
        self._watermarks: Watermarks | None = None
        self._state = StateFile(spec.context_file)

    def __getstate__(self) -> dict:
        return {"spec": self.spec}

    def __setstate__(self, d: dict) -> None:
        self.__init__(d["spec"])

    def initialOffset(self) -> dict:
        return {"offset": self.spec.start_offset}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.spec.max_messages)

    def _message_cap(self, limit: ReadLimit) -> int:
        """Messages per batch: max_messages, fewer when max_bytes at the channel's average
        Insert/Delete message size says so (sizes are unknown until read; counting every
        message as DML-sized keeps a batch under max_bytes whatever the mix); the largest
        message size until the channel has an average."""
        cap = self.spec.max_messages
        average = self._state.load().average_dml_bytes()
        cap = min(cap, max(1, int(self.spec.max_bytes // (average or MAX_MESSAGE_BYTES))))
        if isinstance(limit, ReadMaxRows):
            cap = min(cap, limit.max_rows)
        return cap

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self._state.load().collection_dropped:
            return start  # nothing more to do until the channel is released
        if self._watermarks is None:
            self._watermarks = Watermarks(self.spec.bootstrap)
        high = self._watermarks.high(self.spec.pchannel, self.spec.partition)
        first = start["offset"]
        if high < first:
            raise BrokerError(f"{self.spec.pchannel}[{self.spec.partition}] ends at offset {high}, before the "
                              f"checkpoint {first}: the broker lost data (a memory-only broker restarted?)")
        return {"offset": min(high, first + self._message_cap(limit))}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        state = self._state.load()
        parts = 1 if state.replay else self.spec.splits
        text = state.to_json()
        return [RangePartition(a, b, text) for a, b in split_range(start["offset"], end["offset"], parts)]

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        from ..storage.channel_state import ChannelState
        spec = self.spec
        handoff = Handoff.open(spec.handoff_dir)
        router = Router(spec.layout, ChannelState.from_json(partition.state_json), spec.schema.name,
                        spec.delete_watermark, spec.quarantine_watermark, partition.first, partition.end, handoff)
        try:
            for chunk in read_range(spec.bootstrap, spec.pchannel, spec.partition, partition.first, partition.end):
                for offset, value in chunk:
                    batch = router.route(offset, value)
                    if batch is not None:
                        yield batch
                del chunk  # not kept alive through release_task_memory below
        except BaseException:
            if handoff is not None:
                handoff.discard()
            raise
        yield router.summary()
        release_task_memory()

    def commit(self, end: dict) -> None:
        """Nothing to do: the sink's Delta commit is the checkpoint."""

    def stop(self) -> None:
        if self._watermarks is not None:
            self._watermarks.close()
