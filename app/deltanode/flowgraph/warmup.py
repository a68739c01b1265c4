"""Warm Spark's Python workers before the first channel arrives.

The first micro-batch of the first flowgraph in a driver is mostly Python start-up: Spark
starts one worker daemon per worker module (data source lookup, creation, read planning,
write planning, the task workers, the streaming sink's commit runner), one after the
other, and each imports pyspark before it forks. A DataNode runs one tiny streaming query
through the same stages at start, so those daemons (and, for a minute, their idle workers)
are up when a channel is assigned, and a failover does not pay for them. Importing this
module imports the flowgraph's source and sink too, so the idle workers kept from the
warm-up have them loaded (protobuf, Kafka client, parquet, deltalake).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from . import sink, source  # noqa: F401 - loaded into the warmed-up workers, see above
from .records import RECORD_SCHEMA, spark_ddl


@dataclass
class _Slice(InputPartition):
    index: int


class WarmupSource(DataSource):
    """A stream of one empty batch, split like a flowgraph's, into a sink that writes nothing."""

    @classmethod
    def name(cls) -> str:
        return "deltanode_warmup"

    def schema(self) -> str:
        return spark_ddl(RECORD_SCHEMA)

    def streamReader(self, schema) -> "_Reader":
        return _Reader(int(self.options.get("splits", "2")))

    def streamWriter(self, schema, overwrite: bool) -> "_Writer":
        return _Writer()


class _Reader(DataSourceStreamReader):
    def __init__(self, splits: int) -> None:
        self.splits = splits

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def latestOffset(self) -> dict:
        return {"offset": 1}

    def partitions(self, start: dict, end: dict) -> list[_Slice]:
        return [_Slice(i) for i in range(self.splits)]

    def read(self, partition: _Slice) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)

    def commit(self, end: dict) -> None:
        pass


@dataclass
class _Done(WriterCommitMessage):
    rows: int


class _Writer(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Done:
        return _Done(sum(b.num_rows for b in iterator))

    def commit(self, messages: list[_Done], batchId: int) -> None:
        """Nothing to commit: the module-level imports above are the point."""


def warm_up(spark: SparkSession, scratch_dir: str, splits: int = 2) -> float:
    """Run one batch through a throw-away streaming query; returns the seconds it took.

    Its Spark checkpoint goes to a fresh directory under ``scratch_dir``, removed afterwards
    (a reused one would make the query find its batch done and start no worker at all).
    """
    t0 = time.monotonic()
    checkpoint = os.path.join(scratch_dir, f"warmup-{uuid.uuid4().hex[:12]}")
    spark.dataSource.register(WarmupSource)
    query = (spark.readStream.format(WarmupSource.name()).option("splits", str(splits)).load()
             .writeStream.format(WarmupSource.name()).option("checkpointLocation", checkpoint)
             .queryName("deltanode-warmup").start())
    try:
        query.processAllAvailable()  # its one batch (the reader never has a second)
    finally:
        query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    return time.monotonic() - t0
