"""The Spark Structured Streaming reference: what a lakehouse engineer builds instead of DeltaNode.

One PySpark application, run as a process of its own (so its cores and RSS are measured like
the DataNode's, ``procs.TreeSampler``): ``spark.readStream.format("kafka")`` (Spark's Kafka source,
spark-sql-kafka-0-10, ``build/jvm/spark-kafka``) subscribes to the pchannel topics, and
``foreachBatch`` decodes Milvus's messages and writes every collection's Delta table with
delta-spark, exactly once.

``python -m deltanode_bench.structured_streaming child SPEC_JSON`` runs it (what the runner
functions below start); ``python -m deltanode_bench.structured_streaming backlog|steady|scale
...`` runs one benchmark point on a broker of its own and prints a small table (``--help``).

How it is built, and why (each choice what Spark's and Delta's docs recommend, or measured):

* **Trigger: none, i.e. ``processingTime = 0``**: the next micro-batch is planned as soon as the
  last one committed; with nothing new Spark polls the source every
  ``spark.sql.streaming.pollingDelay`` (10 ms). That is the fastest micro-batch trigger that
  keeps up: a fixed interval only adds its wait to every insert's latency, and a batch that
  takes longer than the interval starts the next at once anyway. ``availableNow`` is for backlogs
  that end (it would be as fast here, not faster). Continuous processing and Spark 4.1's
  real-time mode are not micro-batch modes: they have no ``foreachBatch``, which idempotent
  writes to many Delta tables need (Delta's docs: "Idempotent table writes in foreachBatch").
* **maxOffsetsPerTrigger** (records, over all partitions; Spark's Kafka source has no byte cap):
  the runners derive it from the message size so that a batch holds about the DataNode's
  ``datanode.batch.max.bytes`` (256 MB) of inserts: a full batch amortizes the per-batch costs
  (planning, the offset and commit logs, a Delta commit per table) as the DataNode's full cycles
  do, and bounds a catch-up batch. In steady state the cap does not bind: a batch takes what
  arrived while the previous one ran.
* **minPartitions** = the cores (2) for a single busy topic: Spark's Kafka source reads one topic
  partition in one task unless asked to split its offset range, and the decode and the Parquet
  write run in that task: without it one core idles. With many topics, the batch is read in one
  task per topic partition (16), coalesced to ``read_partitions`` (2) before decoding, so a batch
  of 16 quiet pchannels starts 2 Python workers, not 16.
* **Decoding on executors**, in one of two forms (``Spec.decode``, ``--decode``) that write the
  same rows and the same table schema; nothing is collected to the driver but per-collection row
  counts. Each insert is routed by its ``shardName`` (the vchannel) to its collection; TimeTicks,
  deletes, DDL and inserts of unknown vchannels are skipped (the reference persists inserts only:
  this is the benchmark's workload). Rows get DeltaNode's insert_log columns: the schema's fields
  (the FloatVector as ``array<float>``, as DeltaNode stores it), ``_ts``, ``_row_id``,
  ``_segment_id``, ``_partition_id``; one table per collection at ``{root}/insert_log/{collection_id}``.

  - ``python`` (the default): ``mapInArrow`` over the batch's ``value`` column, with DeltaNode's
    own decoder (``deltanode.executor.decode.parse`` / ``insert_columns``: protobuf to Arrow
    columns in bulk).
  - ``jvm``: no Python worker on the data path. Spark's ``from_protobuf`` (spark-protobuf) is the
    form Spark documents, but the package registry this project reaches serves no spark-protobuf
    jar; two Java UDFs (``build/jvm/spark-milvus``: protobuf-java's ``CodedInputStream`` with
    milvus-proto's field numbers) give the columns from_protobuf would. The header first
    (``MsgBase.msg_type``, ``shardName``) keeps the inserts of known vchannels, then the
    InsertRequest: each FieldData's values as an array of its type, a FloatVector's already cut
    into rows of ``dim`` (cut in Spark SQL with ``transform``/``slice``, a batch decoded 4-6x
    slower: the lambda runs interpreted, once a row). Spark SQL picks each field's FieldData by id,
    drops an insert whose sizes do not match its rows, and ``arrays_zip`` + ``inline_outer`` make
    the rows. It reads the benchmark's types (scalars, VarChar, JSON, FloatVector; not nullable).

  Python is the default because neither form is faster on the benchmark's loads (one run each,
  same command, the machine shared; MB/s of the 19 and 56 MB backlogs, p50 / p99 of the steady
  10 MB/s, cores): python 1.4 and 3.0 MB/s, 14.94 / 22.18 s, 1.26 / 1.48 cores; jvm 1.6 and 3.1
  MB/s, 14.93 / 22.79 s, 1.22 / 1.62 cores; at 16 vchannels python 19.73 / 27.71 s (1.36 cores,
  1,246 MiB), jvm 19.55 / 28.05 s (1.14 cores, 1,930 MiB); at 256 vchannels for 30 s python
  committed 260,800 of 383,950 rows by the end of the 120-s drain (98.06 / 192.81 s, 1.39 cores),
  jvm 169,850 of 383,600 (116.76 / 177.12 s, 0.82 cores). Decoding is not where a batch's time
  goes (below), and the python form is the one whose decoder is DeltaNode's own.
* **Exactly once**: each table write is an append with Delta's idempotent-write options
  ``txnAppId`` (one id for the query) and ``txnVersion`` = the micro-batch id. Spark's offset log
  records a batch's offsets before it runs, so a batch run again after a crash reads the same
  records; a table that already committed that batch id skips the write, the others take it.
* **Many collections: one query whose batch fans out**, not one query per collection. Every
  query per collection would read (and fetch from the broker, and decode) every pchannel its
  collection shares with the others: at 500 collections on 16 pchannels each record is read 31
  times on average (collections of 2 shards over 16 pchannels share every pchannel), each query
  keeps its own driver thread, offset and commit logs, Kafka consumers and planning, and 500
  queries on 2 cores never catch up (the DataNode's previous design, one query per vchannel,
  saturated at 64 vchannels: docs/benchmarks.md). One query reads each record once; its batch is
  decoded once (``persist``), the rows counted per collection (a small aggregate, the only thing
  collected), and each collection with rows in the batch gets one Delta append, on
  ``write_threads`` driver threads at once (Spark runs jobs of several threads concurrently: one
  table's Delta commit, done on the driver, overlaps another's Parquet write), each coalesced to
  one task (one file per table and batch; the rows of a table in a batch are few).
  With a single collection the batch is written directly (one pass, no cache, no count).
* **Delta**: delta-spark 4.4 (the ``delta`` component's jars, the same as DeltaNode's Spark SQL),
  with ``spark.databricks.delta.snapshotPartitions`` = 2 as DeltaNode sets it. Tables are created
  by their first append, with ``delta.checkpointInterval`` = 100 (Delta's default is 10; DeltaNode's
  tables get a checkpoint every 100 versions from delta-rs): a checkpoint is a Spark job, and with a
  commit per table and batch the default would run one per 10 collections of every batch. Stats
  are collected as by default.
* **Spark**: ``local[2]``, driver heap ``driver_memory`` (2g: with 1g, the 256-vchannel point's 60-s
  load ran out of heap in its fourth batch, a catch-up batch at the 256-MB cap), the JVM options
  DeltaNode's Spark gets (``deltanode.config.jvm_options.spark_defaults``: C1 only, the class archive when there is
  one, FAIR scheduling, Unix domain sockets to Python). C1 only measured: a 30-s steady 10 MB/s of
  768-dim inserts took p50 / p99 4.55 / 7.14 s with it and 9.15 / 14.47 s with the JVM's default
  compilers, whose C2 threads compiled for most of the run (6.7 s of compile time in 15 s, JFR);
  ``c2`` (``--c2``) for runs long enough to repay it.

Where a batch's time goes (JFR of the driver JVM, C1 only, a 30-s steady load): batches of ~9
inserts took 2.5-2.7 s, most of the JVM's CPU outside Java frames (the Arrow hand-off to and from
the Python worker, Parquet's encoding of the float arrays) and, in Java, the stream thread planning
and generating code for each batch (Janino). Decoding is the small part: 10 inserts of 1,000 x
768 decode in ~1 s in either form and take 4-5 s to write as Parquet (dictionary encoding and
compression off or on alike); at 16 vchannels a batch's 8 Delta appends take 12-15 s in both.

Insert -> durable for the reference: a record at offset ``o`` of a topic belongs to the first
micro-batch whose end offset (Spark's offset log, ``{checkpoint}/offsets/{batch}``) is past ``o``;
it is durable at the timestamp of its collection table's commit with ``txn`` version = that batch
(Delta's commitInfo), the same clock DeltaNode's latency is read from (``deltanode_bench.latency``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from . import latency as lat
from .datanode_run import PYTHONPATH, ROOT
from .procs import TreeSampler, window

APP_ID = "deltanode-bench-structured-streaming"
COLLECTION_COLUMN = "_collection_id"
# tests: SIGKILL the process group at the first table write, from this many on, that leaves its
# batch half written (other tables of the batch still to write)
CRASH_ENV = "SSS_CRASH_AFTER_WRITES"
BATCH_BYTES = 256 << 20                # a batch's inserts, as the DataNode's datanode.batch.max.bytes


def _jars(name: str) -> list[str]:
    from deltanode.config.jars import component_jars
    return [str(p) for p in component_jars(name)]


# ---------------------------------------------------------------------------------------------
# the child: the Structured Streaming application

@dataclass
class Spec:
    bootstrap: str
    topics: list[str]
    collections: list[dict]            # {"collection_id", "vchannels", "schema_b64"}
    root: str                          # tables at {root}/insert_log/{collection_id}
    checkpoint: str
    starting_offsets: str = "earliest"  # or Spark's JSON: {"topic": {"0": offset}}
    max_offsets: int = 10_000           # maxOffsetsPerTrigger
    min_partitions: int = 0             # minPartitions (0: one task per topic partition)
    read_partitions: int = 0            # coalesce the batch before decoding (0: as read)
    write_threads: int = 4
    fanout: str = "auto"                # auto: direct for one collection, else cache; or "cache"
    until: dict = field(default_factory=dict)   # topic -> offset: stop once every batch up to it committed
    driver_memory: str = "2g"
    c1_only: bool = True
    arrow_batch: int = 64               # spark.sql.execution.arrow.maxRecordsPerBatch (Kafka records in)
    log_level: str = "WARN"
    vector_as: str = "array"            # FloatVector columns: "array" (array<float>, as DeltaNode) or "binary"
    decode: str = "python"              # "python": mapInArrow with DeltaNode's decoder; "jvm": Java UDFs + Spark SQL


def decoder(routes: dict[str, tuple[int, bytes]], arrow_schema_bytes: bytes):
    """The ``mapInArrow`` function: Kafka ``value`` batches in, insert rows out (on executors).

    ``routes``: vchannel -> (collection id, serialized CollectionSchema); every collection of a
    ``decoder`` has the same insert_log columns (``arrow_schema_bytes``, serialized)."""
    def decode_batches(batches: Iterator) -> Iterator:
        import numpy as np
        import pyarrow as pa

        from deltanode.executor import decode
        from deltanode.wire.milvus_proto import schema_pb2
        from deltanode.wire.schema import CollectionLayout, DataType

        out_schema = pa.ipc.read_schema(pa.py_buffer(arrow_schema_bytes))
        layouts = {}
        for vchannel, (cid, raw) in routes.items():
            layouts[vchannel] = (cid, CollectionLayout.from_proto(schema_pb2.CollectionSchema.FromString(raw)))
        insert = decode.MSG_INSERT
        as_binary = [i for i, f in enumerate(out_schema) if f.type == pa.binary()
                     and f.name in {s.name for _, lay in layouts.values() for s in lay.fields
                                    if s.data_type == DataType.FloatVector}]
        for batch in batches:
            for value in batch.column(0).to_pylist():
                try:
                    msg_type, msg = decode.parse(value)
                except decode.Reject:
                    continue   # DeltaNode quarantines these; the reference skips them
                if msg_type != insert:
                    continue
                route = layouts.get(msg.shardName)
                if route is None:
                    continue
                cid, layout = route
                try:
                    cols, n = decode.insert_columns(layout, msg)
                except decode.Reject:
                    continue
                for i in as_binary:   # a FloatVector as Milvus's binlogs hold it: dim x float32 LE a row
                    values = cols[i].flatten()
                    width = len(values) // n * 4
                    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
                    cols[i] = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                                     values.buffers()[1]])
                cols.append(pa.array(np.full(n, msg.segmentID, dtype=np.int64)))
                cols.append(pa.array(np.full(n, msg.partitionID, dtype=np.int64)))
                cols.append(pa.array(np.full(n, cid, dtype=np.int64)))
                yield pa.RecordBatch.from_arrays(cols, schema=out_schema)
    return decode_batches


# The "jvm" decode form: Java UDFs (build/jvm/spark-milvus) read the wire format into the columns
# from_protobuf would give; Spark SQL turns an InsertRequest's columnar FieldData into rows.
HEADER_UDF, INSERT_UDF = "milvus_header", "milvus_insert"
HEADER_TYPE = "struct<msg_type:int,shard:string>"
FIELD_TYPE = ("struct<id:bigint,name:string,dim:bigint,longs:array<bigint>,ints:array<int>,floats:array<float>,"
              "doubles:array<double>,bools:array<boolean>,strings:array<string>,bytes:array<binary>,"
              "vectors:array<array<float>>>")
INSERT_TYPE = (f"struct<shard:string,partition:bigint,segment:bigint,ts:array<bigint>,row_ids:array<bigint>,"
               f"fields:array<{FIELD_TYPE}>>")
UDF_CLASS = "deltanode.bench.MilvusDecode"


def register_jvm_decoders(spark) -> None:
    spark.udf.registerJavaFunction(HEADER_UDF, f"{UDF_CLASS}$Header", HEADER_TYPE)
    spark.udf.registerJavaFunction(INSERT_UDF, f"{UDF_CLASS}$Insert", INSERT_TYPE)


def _values(spec, fd):
    """The array of a FieldData struct that holds ``spec``'s values (a FloatVector's: one array a row)."""
    from deltanode.wire.schema import DataType
    slot = {DataType.Bool: "bools", DataType.Int8: "ints", DataType.Int16: "ints", DataType.Int32: "ints",
            DataType.Int64: "longs", DataType.Float: "floats", DataType.Double: "doubles",
            DataType.VarChar: "strings", DataType.JSON: "bytes", DataType.FloatVector: "vectors"}.get(spec.data_type)
    if slot is None or spec.nullable:
        raise ValueError(f"decode 'jvm' does not read field {spec.name!r} ({spec.type_name}"
                         f"{', nullable' if spec.nullable else ''}): use decode 'python'")
    return fd[slot]


def _field_of(spec):
    """The FieldData of ``spec`` in an insert's ``fields``: by id, or by name when it comes without one."""
    return lambda f: (f["id"] == spec.field_id) | ((f["id"] == 0) & (f["name"] == spec.name))


def jvm_rows(raw, routes: dict[str, tuple[int, bytes]], spark_schema):
    """A batch's Kafka ``value`` column -> insert rows of ``spark_schema`` (the mapInArrow form's),
    all in the JVM: the header read first to keep inserts of known vchannels, then the insert."""
    from pyspark.sql import functions as F

    from deltanode.wire.milvus_proto import common_pb2, schema_pb2
    from deltanode.wire.schema import CollectionLayout, DataType
    layout = CollectionLayout.from_proto(schema_pb2.CollectionSchema.FromString(next(iter(routes.values()))[1]))
    header = F.call_function(HEADER_UDF, F.col("value"))
    msgs = (raw.select("value", header.alias("h"))
            .where((F.col("h.msg_type") == int(common_pb2.MsgType.Insert)) & F.col("h.shard").isin(list(routes)))
            .select(F.call_function(INSERT_UDF, F.col("value")).alias("m")))
    m = F.col("m")
    n = F.size(m["ts"])
    fields = {s.name: F.get(F.filter(m["fields"], _field_of(s)), 0) for s in layout.fields}
    values = {s.name: _values(s, fields[s.name]) for s in layout.fields}
    valid = m.isNotNull() & (n > 0) & (F.size(m["row_ids"]) == n)
    for s in layout.fields:
        valid &= F.size(values[s.name]) == n
        if s.data_type == DataType.FloatVector:
            valid &= fields[s.name]["dim"] == s.dim
    cid = F.create_map(*[F.lit(x) for v, (c, _) in routes.items() for x in (v, c)])[m["shard"]]
    per_message = msgs.where(valid).select(
        cid.alias(COLLECTION_COLUMN), m["segment"].alias("_segment_id"), m["partition"].alias("_partition_id"),
        *[values[s.name].alias(s.name) for s in layout.fields], m["ts"].alias("_ts"), m["row_ids"].alias("_row_id"))
    return _explode(per_message, layout, spark_schema)


def _explode(per_message, layout, spark_schema):
    """One row per position of a message's arrays (``arrays_zip``, then ``inline_outer``: the
    optimizer guards ``inline`` with a filter on its input's size, which evaluates the zip a second
    time; messages are never empty here)."""
    from pyspark.sql import functions as F
    columns = [s.name for s in layout.fields] + ["_ts", "_row_id"]
    rows = per_message.select(COLLECTION_COLUMN, "_segment_id", "_partition_id",
                              F.arrays_zip(*[F.col(c) for c in columns]).alias("rows"))
    flat = rows.select(COLLECTION_COLUMN, "_segment_id", "_partition_id", F.inline_outer("rows"))
    return flat.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in spark_schema.fields])


def _schema_groups(collections: list[dict], vector_as: str = "array"):
    """Collections grouped by their insert_log Arrow schema: (arrow schema, routes) per group;
    ``vector_as`` "binary": FloatVector columns as binary (dim x float32, little-endian)."""
    import pyarrow as pa
    from pymilvus.grpc_gen import schema_pb2

    from deltanode.wire.schema import CollectionLayout, DataType
    groups: dict[bytes, tuple[pa.Schema, dict]] = {}
    for c in collections:
        raw = base64.b64decode(c["schema_b64"])
        layout = CollectionLayout.from_proto(schema_pb2.CollectionSchema.FromString(raw))
        schema = layout.insert_schema()
        if vector_as == "binary":
            for spec in layout.fields:
                if spec.data_type == DataType.FloatVector:
                    i = schema.get_field_index(spec.name)
                    schema = schema.set(i, pa.field(spec.name, pa.binary(), nullable=schema.field(i).nullable))
        schema = schema.append(pa.field(COLLECTION_COLUMN, pa.int64(), nullable=False))
        key = schema.serialize().to_pybytes()
        group = groups.setdefault(key, (schema, {}))
        for v in c["vchannels"]:
            group[1][v] = (int(c["collection_id"]), raw)
    return list(groups.values())


def table_path(root: str, collection_id: int) -> str:
    return os.path.join(root, "insert_log", str(collection_id))


def child(spec: Spec) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark import StorageLevel
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from deltanode.config.jvm_options import C1_ONLY, spark_defaults
    from deltanode.lake.spark import configure

    options = {**spark_defaults(), "spark.ui.enabled": "false", "spark.driver.memory": spec.driver_memory,
               "spark.sql.shuffle.partitions": "2",
               "spark.sql.execution.arrow.maxRecordsPerBatch": str(spec.arrow_batch),
               "spark.jars": ",".join(_jars("spark-kafka") + (_jars("spark-milvus") if spec.decode == "jvm" else [])),
               "spark.sql.streaming.stopGracefullyOnShutdown": "true",
               # a checkpoint every 100 commits, as DeltaNode's tables get (delta-rs's cadence), not every 10:
               # each checkpoint is a Spark job, and at one commit per table and batch the default would
               # run one for every 10 of a batch's collections
               "spark.databricks.delta.properties.defaults.checkpointInterval": "100",
               # instrumentation: keep every batch's offsets (insert -> durable maps offsets to batches)
               "spark.sql.streaming.minBatchesToRetain": "1000000"}
    if not spec.c1_only:
        for key in ("spark.driver.defaultJavaOptions", "spark.executor.defaultJavaOptions"):
            rest = options[key].replace(C1_ONLY, "").strip()
            if rest:
                options[key] = rest
            else:
                del options[key]
    spark = configure(SparkSession.builder.appName("sss-reference").config(map=options)).getOrCreate()
    spark.sparkContext.setLogLevel(spec.log_level)
    if spec.decode == "jvm":
        if spec.vector_as != "array":
            raise ValueError("decode 'jvm' writes FloatVectors as array<float> only")
        register_jvm_decoders(spark)

    groups = [(from_arrow_schema(schema), schema.serialize().to_pybytes(), routes, schema)
              for schema, routes in _schema_groups(spec.collections, spec.vector_as)]
    ids = [int(c["collection_id"]) for c in spec.collections]
    crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
    writes = [0]
    lock = threading.Lock()

    def append(df, collection_id: int, batch_id: int, left: list[int] | None = None) -> None:
        """Append ``df`` to the collection's table as the batch's idempotent write; ``left``: the
        batch's tables not yet written, this one included (a fan-out's, shared by its threads)."""
        (df.write.format("delta").mode("append")
         .option("txnAppId", APP_ID).option("txnVersion", batch_id)
         .save(table_path(spec.root, collection_id)))
        with lock:
            writes[0] += 1
            if left is not None:
                left[0] -= 1
            if crash_after and writes[0] >= crash_after and left is not None and left[0] > 0:
                os.killpg(os.getpgid(0), signal.SIGKILL)

    def each_batch(batch_df, batch_id: int) -> None:
        t0 = time.time()
        raw = batch_df.select("value")
        if spec.read_partitions:
            raw = raw.coalesce(spec.read_partitions)
        counts: dict[int, int] = {}
        cached = []
        try:
            for spark_schema, schema_bytes, routes, _ in groups:
                decoded = (jvm_rows(raw, routes, spark_schema) if spec.decode == "jvm" else
                           raw.mapInArrow(decoder(routes, schema_bytes), spark_schema))
                if spec.fanout == "auto" and len(ids) == 1:
                    append(decoded.drop(COLLECTION_COLUMN), ids[0], batch_id)
                    counts[ids[0]] = -1   # not counted
                    continue
                decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
                cached.append(decoded)
                present = {int(r[0]): int(r[1]) for r in
                           decoded.groupBy(COLLECTION_COLUMN).count().collect()}
                counts.update(present)

                left = [len(present)]

                def write(cid: int, decoded=decoded, left=left) -> None:
                    append(decoded.filter(F.col(COLLECTION_COLUMN) == cid).drop(COLLECTION_COLUMN).coalesce(1),
                           cid, batch_id, left)

                with ThreadPoolExecutor(max(1, spec.write_threads)) as pool:
                    for f in [pool.submit(write, cid) for cid in sorted(present)]:
                        f.result()
        finally:
            for d in cached:
                d.unpersist()
        print(json.dumps({"ev": "batch", "batch": batch_id, "t0": t0, "t1": time.time(),
                          "collections": len(counts), "rows": sum(v for v in counts.values() if v > 0)}),
              flush=True)

    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", spec.bootstrap)
              .option("subscribe", ",".join(spec.topics))
              .option("startingOffsets", spec.starting_offsets)
              .option("failOnDataLoss", "true")
              .option("maxOffsetsPerTrigger", str(spec.max_offsets))
              # the DataNode's consumer settings for large messages (mq.kafka defaults)
              .option("kafka.max.partition.fetch.bytes", str(16 << 20))
              .option("kafka.fetch.max.bytes", str(32 << 20)))
    if spec.min_partitions:
        reader = reader.option("minPartitions", str(spec.min_partitions))
    query = (reader.load().writeStream.foreachBatch(each_batch)
             .option("checkpointLocation", spec.checkpoint).queryName("sss-reference").start())
    print(json.dumps({"ev": "started", "t": time.time()}), flush=True)

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    seen = -1
    try:
        while query.isActive and not stopping.is_set():
            query.awaitTermination(0.5)
            progress = query.lastProgress
            if progress and progress["batchId"] != seen:
                seen = progress["batchId"]
                print(json.dumps({"ev": "progress", "batch": seen, "rows": progress["numInputRows"],
                                  "ms": progress["durationMs"]}), flush=True)
            if spec.until and reached(spec.checkpoint, spec.until):
                break
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    finally:
        query.stop()
        spark.stop()
    print(json.dumps({"ev": "stopped", "t": time.time()}), flush=True)


# ---------------------------------------------------------------------------------------------
# reading what the query did: Spark's checkpoint and the Delta logs

def _source_offsets(path: str) -> dict[str, int] | None:
    """{topic: end offset} of an offset log file (Spark's ``offsets/N``: a version line, the
    batch's metadata, then one line per source; one partition per topic here)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines[2:]:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc and all(isinstance(v, dict) for v in doc.values()):
            return {t: int(parts.get("0", 0)) for t, parts in doc.items()}
    return None


def batch_ends(checkpoint: str) -> dict[int, dict[str, int]]:
    """{batch id: {topic: end offset}} of the batches the offset log holds."""
    d = os.path.join(checkpoint, "offsets")
    out = {}
    for name in os.listdir(d) if os.path.isdir(d) else []:
        if name.isdigit():
            ends = _source_offsets(os.path.join(d, name))
            if ends is not None:
                out[int(name)] = ends
    return out


def committed_batches(checkpoint: str) -> list[int]:
    d = os.path.join(checkpoint, "commits")
    return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def reached(checkpoint: str, until: dict[str, int]) -> bool:
    """Every batch up to ``until`` (topic -> offset) committed."""
    done = committed_batches(checkpoint)
    if not done:
        return False
    ends = _source_offsets(os.path.join(checkpoint, "offsets", str(done[-1]))) or {}
    return all(ends.get(t, 0) >= off for t, off in until.items())


def table_commits(uri: str) -> dict[int, float]:
    """{txn version (batch id): commit timestamp s} of the reference's commits to a table."""
    out: dict[int, float] = {}
    log_dir = os.path.join(uri, "_delta_log")
    for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
        if not (name.endswith(".json") and name[:20].isdigit()):
            continue
        with open(os.path.join(log_dir, name)) as f:
            actions = [json.loads(line) for line in f if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        for a in actions:
            if "txn" in a and a["txn"]["appId"] == APP_ID:
                out.setdefault(int(a["txn"]["version"]), info.get("timestamp", 0) / 1000.0)
    return out


def table_rows(uri: str) -> int:
    """Rows of the files the table holds now (numRecords of its live add actions)."""
    files: dict[str, int] = {}
    log_dir = os.path.join(uri, "_delta_log")
    for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
        if name.endswith(".json") and name[:20].isdigit():
            with open(os.path.join(log_dir, name)) as f:
                for line in f:
                    a = json.loads(line) if line.strip() else {}
                    if "add" in a:
                        files[a["add"]["path"]] = json.loads(a["add"]["stats"])["numRecords"]
                    elif "remove" in a:
                        files.pop(a["remove"]["path"], None)
    return sum(files.values())


def batch_of(ends: dict[int, dict[str, int]], topic: str, offset: int) -> int | None:
    """The first batch whose end offset on ``topic`` is past ``offset``."""
    for b in sorted(ends):
        if ends[b].get(topic, 0) > offset:
            return b
    return None


def durable_latencies(checkpoint: str, root: str, sent: Iterable[tuple[int, str, int, float]]
                      ) -> tuple[list[float], int]:
    """Insert -> durable of each ``(collection id, topic, offset, produce time)``:
    (latencies, how many are not durable)."""
    import bisect
    ends = batch_ends(checkpoint)
    order = sorted(ends)
    per_topic: dict[str, list[int]] = {}
    commits: dict[int, dict[int, float]] = {}
    out, missing = [], 0
    for cid, topic, offset, t in sent:
        if topic not in per_topic:
            per_topic[topic] = [ends[b].get(topic, 0) for b in order]
        i = bisect.bisect_right(per_topic[topic], offset)
        if cid not in commits:
            commits[cid] = table_commits(table_path(root, cid))
        ts = commits[cid].get(order[i]) if i < len(order) else None
        if ts is None:
            missing += 1
        else:
            out.append(ts - t)
    return out, missing


# ---------------------------------------------------------------------------------------------
# the parent: start, follow, measure

class Reference:
    """The reference in a child process (a process group of its own), its tree sampled."""

    def __init__(self, spec: Spec, log: str, broker_pid: int | None = None, sample_interval: float = 0.2,
                 env: dict | None = None) -> None:
        self.spec, self.log = spec, log
        self.broker_pid, self.sample_interval = broker_pid, sample_interval
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.sampler: TreeSampler | None = None
        self.t_launch = 0.0

    def start(self) -> Reference:
        env = dict(os.environ, **self.env)
        env["PYTHONPATH"] = PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", "")
        os.makedirs(os.path.dirname(self.log) or ".", exist_ok=True)
        self.t_launch = time.time()
        self.proc = subprocess.Popen([sys.executable, "-m", "deltanode_bench.structured_streaming", "child",
                                      json.dumps(asdict(self.spec))], env=env, cwd=ROOT,
                                     stdout=open(self.log, "a"), stderr=subprocess.STDOUT, start_new_session=True)
        self.sampler = TreeSampler(self.proc.pid, interval=self.sample_interval, broker_pid=self.broker_pid).start()
        return self

    def events(self) -> list[dict]:
        out = []
        with open(self.log, errors="replace") as f:
            for line in f:
                if line.startswith('{"ev"'):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        return out

    def text(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def started_at(self, timeout: float = 180) -> float:
        """Wall clock at which the query started (its ``started`` event)."""
        deadline = time.monotonic() + timeout
        while True:
            ev = next((e for e in self.events() if e["ev"] == "started"), None)
            if ev is not None:
                return ev["t"]
            self._check(deadline, "start")
            time.sleep(0.2)

    def _check(self, deadline: float, what: str) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the reference exited ({self.proc.returncode}) before {what}; "
                               f"see {self.log}:\n{self.text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the reference did not {what} in time; see {self.log}")

    def wait_reached(self, until: dict[str, int], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not reached(self.spec.checkpoint, until):
            if self.proc.poll() is not None and not reached(self.spec.checkpoint, until):
                raise RuntimeError(f"the reference exited ({self.proc.returncode}); see {self.log}:\n"
                                   f"{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait()

    def stop(self, timeout: float = 60) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)   # the driver stops the query and its JVM
            self.wait_exit(timeout)
        self._stop_sampler()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._stop_sampler()

    def _stop_sampler(self) -> None:
        if self.sampler is not None and self.sampler._thread.is_alive():
            self.sampler.stop()   # its samples stay


def collections_spec(colls: Iterable) -> list[dict]:
    """Spec entries of bench collections (anything with collection_id, vchannels, schema_b64)."""
    return [{"collection_id": c.collection_id, "vchannels": list(c.vchannels), "schema_b64": c.schema_b64}
            for c in colls]


def max_offsets_for(message_bytes: int, topics: int = 1) -> int:
    """maxOffsetsPerTrigger holding about BATCH_BYTES of messages of ``message_bytes``."""
    return max(topics, BATCH_BYTES // max(1, message_bytes))


@dataclass
class ReferenceResult:
    label: str
    bytes: int
    messages: int
    rows_produced: int
    rows_in_delta: int
    seconds_query: float        # query started -> last commit
    seconds_total: float        # process launched -> last commit
    batches: int
    cores: float | None         # average busy cores of the tree, query started -> last commit
    cores_broker: float | None
    peak_rss: int | None        # the tree's RSS summed, at its peak
    latencies: list[float] = field(default_factory=list)
    not_durable: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds_query / 1e6 if self.seconds_query > 0 else 0.0

    @property
    def mb_per_s_total(self) -> float:
        return self.bytes / self.seconds_total / 1e6 if self.seconds_total > 0 else 0.0


def _last_commit(root: str, ids: list[int], upto_batch: int) -> float:
    ts = [t for cid in ids for b, t in table_commits(table_path(root, cid)).items() if b <= upto_batch]
    return max(ts) if ts else time.time()


def _covering_batch(checkpoint: str, until: dict[str, int]) -> int:
    ends = batch_ends(checkpoint)
    for b in sorted(ends):
        if all(ends[b].get(t, 0) >= off for t, off in until.items()):
            return b
    return max(ends) if ends else 0


def run_backlog(bootstrap: str, collections: list, targets: dict[str, int], work: str, *, label: str = "backlog",
                message_bytes: int, sent: list | None = None, starting_offsets: str = "earliest",
                min_partitions: int = 2, broker_pid: int | None = None, timeout: float = 900,
                rows_produced: int = 0, **spec_extra) -> ReferenceResult:
    """Run the reference from ``starting_offsets`` until every topic of ``targets`` (topic -> high
    watermark) is committed; MB/s over the wire bytes of ``sent`` (``workload.Sent`` records, or
    ``(topic, offset, size)``) in the range read.

    ``collections``: bench collections (``collection_id``, ``vchannels``, ``pchannels``, ``schema_b64``)."""
    topics = sorted({p for c in collections for p in c.pchannels})
    spec = Spec(bootstrap=bootstrap, topics=topics, collections=collections_spec(collections),
                root=os.path.join(work, "delta"), checkpoint=os.path.join(work, "checkpoint"),
                starting_offsets=starting_offsets, max_offsets=max_offsets_for(message_bytes, len(topics)),
                min_partitions=min_partitions if len(topics) == 1 else 0, until=targets, **spec_extra)
    ref = Reference(spec, os.path.join(work, "reference.log"), broker_pid=broker_pid).start()
    try:
        t_query = ref.started_at()
        if not ref.wait_reached(targets, timeout):
            raise TimeoutError(f"the reference did not reach {targets} in {timeout:.0f} s; see {ref.log}")
        ref.wait_exit(120)
    finally:
        ref.kill()
    last = _covering_batch(spec.checkpoint, targets)
    ids = [int(c.collection_id) for c in collections]
    t_done = _last_commit(spec.root, ids, last)
    stats = window(ref.sampler.samples, t_query, t_done) if ref.sampler else None
    whole = window(ref.sampler.samples, 0, time.time()) if ref.sampler else None
    nbytes = msgs = 0
    for rec in sent or []:
        topic, offset, size = (rec.topic, rec.offset, rec.size) if hasattr(rec, "topic") else rec
        if offset < targets.get(topic, 0):
            nbytes += size
            msgs += 1
    return ReferenceResult(label, nbytes, msgs, rows_produced, sum(table_rows(table_path(spec.root, i)) for i in ids),
                           t_done - t_query, t_done - ref.t_launch, last + 1,
                           stats.cores if stats else None, stats.cores_broker if stats else None,
                           whole.total_rss_peak if whole else None)


def run_steady(bootstrap: str, coll, work: str, *, mb_s: float = 10.0, seconds: float = 20.0,
               message_bytes: int, broker_pid: int | None = None, min_partitions: int = 2,
               **spec_extra) -> ReferenceResult:
    """A steady ``mb_s`` per vchannel of ``coll`` (a ``workload.BenchCollection``, ticking) for
    ``seconds``, the reference reading from the pchannels' current ends; insert -> durable of every
    InsertRequest of the load."""
    from .workload import BenchCollection
    assert isinstance(coll, BenchCollection)
    starts = coll.settled_targets()
    start = {p: starts[v] for p, v in zip(coll.pchannels, coll.vchannels)}
    starting = json.dumps({p: {"0": off} for p, off in start.items()})
    spec = Spec(bootstrap=bootstrap, topics=list(coll.pchannels), collections=collections_spec([coll]),
                root=os.path.join(work, "delta"), checkpoint=os.path.join(work, "checkpoint"),
                starting_offsets=starting, max_offsets=max_offsets_for(message_bytes, len(coll.pchannels)),
                min_partitions=min_partitions if len(coll.pchannels) == 1 else 0, **spec_extra)
    ref = Reference(spec, os.path.join(work, "reference.log"), broker_pid=broker_pid).start()
    try:
        t_query = ref.started_at()
        # warmed up: a batch of ticks ran (the first batch starts the Python workers)
        deadline = time.monotonic() + 120
        while len(committed_batches(spec.checkpoint)) < 2:
            ref._check(deadline, "run its first batches")
            time.sleep(0.2)
        first = len(coll.producer.sent)
        interval = message_bytes / (mb_s * 1e6)
        t0 = time.time()
        nxt = time.monotonic()
        end = nxt + seconds
        while nxt < end:
            for p, v in zip(coll.pchannels, coll.vchannels):
                coll.producer.insert_message(p, v, coll.segments[v])
            nxt += interval
            time.sleep(max(0.0, nxt - time.monotonic()))
        t1 = time.time()
        coll.producer.flush_producer(60)
        load = [s for s in coll.producer.sent[first:] if s.rows]
        targets = coll.settled_targets()
        until = {p: targets[v] for p, v in zip(coll.pchannels, coll.vchannels)}
        ref.wait_reached(until, 120 + seconds * 5)
        t_done = time.time()
    finally:
        ref.stop()
    lats, missing = durable_latencies(spec.checkpoint, spec.root,
                                      [(coll.collection_id, s.topic, s.offset, s.t) for s in load])
    stats = window(ref.sampler.samples, t0, t1)
    whole = window(ref.sampler.samples, t_query, t_done)
    nbytes = sum(s.size for s in load)
    res = ReferenceResult("steady", nbytes, len(load), sum(s.rows for s in load),
                          table_rows(table_path(spec.root, coll.collection_id)), t1 - t0, t1 - t0,
                          len(committed_batches(spec.checkpoint)), stats.cores if stats else None,
                          stats.cores_broker if stats else None, whole.total_rss_peak if whole else None,
                          lats, missing)
    return res


@dataclass
class ScaleReference:
    vchannels: int
    collections: int
    seconds: float
    inserts: int
    cores: float
    cores_split: tuple[float, float, float]
    cores_broker: float
    cores_machine: float
    rss_peak: int
    latencies: list[float]
    not_durable: int
    rows_produced: int
    rows_in_delta: int
    batches: int
    batch_seconds_median: float | None
    commits_per_s: float


def scale_collections(n: int, pchannels: int, first_id: int) -> list[tuple[int, list[str], list[str]]]:
    """(collection id, pchannels, vchannels) of the scale benchmark's ``n`` vchannels: collections of
    2 shards (one of 1 when ``n`` is odd), each on the least used pchannels as ``create_collections``
    picks them."""
    from collections import Counter

    from deltanode.wire.names import pchannel_name, vchannel_name

    from .scale import _collections
    usage = Counter({pchannel_name("by-dev-rootcoord-dml", i): 0 for i in range(pchannels)})
    out = []
    for i, shards in enumerate(_collections(n)):
        cid = first_id + i * 10
        ps = [p for p, _ in sorted(usage.items(), key=lambda kv: (kv[1], int(kv[0].rsplit("_", 1)[1])))][:shards]
        usage.update(ps)
        out.append((cid, ps, [vchannel_name(p, cid, k) for k, p in enumerate(ps)]))
    return out


def run_scale(n: int, work: str, *, seconds: float = 60.0, drain: float = 120.0, rate_cap: float = 1000.0,
              write_threads: int = 4, max_offsets: int | None = None, read_partitions: int = 2,
              **spec_extra) -> ScaleReference:
    """The scale benchmark's load on ``n`` vchannels, the reference reading it: an embedded Apache
    Kafka (the broker standalone embeds) of its own with the 16 pchannels, a TimeTick every 200 ms
    on each from the start, N/2 collections x 2 shards, then (once the reference runs batches) one
    50-row x 128-dim InsertRequest per vchannel per second (up to ``rate_cap`` a second), through one
    proxy-like producer, with ``scale._pace``, for ``seconds``; then up to ``drain`` s for the rest."""
    from deltanode.mq.broker import Broker
    from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
    from deltanode.standalone.kafka_server import EmbeddedKafka
    from deltanode.wire.schema import CollectionLayout, schema_from_json

    from .scale import DIM, PCHANNELS, ROWS, _pace
    from .workload import BenchProducer, bench_schema

    os.makedirs(work, exist_ok=True)
    kafka = EmbeddedKafka(os.path.join(work, "kafka"))
    kafka.start()
    stop = threading.Event()
    proxy = ref = None
    try:
        broker = Broker("kafka", kafka.bootstrap_servers)
        colls = scale_collections(n, PCHANNELS, int(time.time()) % 100000 * 10000)
        pchannels = sorted({p for _, ps, _ in colls for p in ps}, key=lambda p: int(p.rsplit("_", 1)[1]))
        broker.create_topics(pchannels)
        schema_doc = bench_schema(DIM)
        del schema_doc["fields"][1]   # pk and the vector, as scale.py
        proxy = Proxy(broker)
        ticker(MilvusProducer(proxy, CollectionLayout(()), 0), pchannels, stop)

        class Rec:   # what scale._pace and collections_spec need
            def __init__(self, cid, ps, vs):
                self.collection_id, self.pchannels, self.vchannels, self.shards = cid, ps, vs, len(vs)
                schema = schema_from_json(schema_doc, f"scale{cid}")
                self.schema_b64 = base64.b64encode(schema.SerializeToString()).decode()
                self.layout = CollectionLayout.from_proto(schema)

        records = [Rec(*c) for c in colls]
        producers = {r.collection_id: BenchProducer(proxy, r.layout, r.collection_id, f"scale{r.collection_id}",
                                                    rows=ROWS) for r in records}
        message_bytes = 26_000
        spec = Spec(bootstrap=broker.address, topics=pchannels, collections=collections_spec(records),
                    root=os.path.join(work, "delta"), checkpoint=os.path.join(work, "checkpoint"),
                    starting_offsets="earliest",
                    max_offsets=max_offsets or max_offsets_for(message_bytes, len(pchannels)),
                    read_partitions=read_partitions, write_threads=write_threads, **spec_extra)
        ref = Reference(spec, os.path.join(work, "reference.log"), broker_pid=kafka.proc.pid, sample_interval=0.5)
        ref.start()
        ref.started_at()
        deadline = time.monotonic() + 180
        while len(committed_batches(spec.checkpoint)) < 2:
            ref._check(deadline, "run its first batches")
            time.sleep(0.2)
        rate = min(float(n), rate_cap)
        say(f"reference, {n} vchannel(s): {rate:.0f} inserts/s and {PCHANNELS * 5} ticks/s for {seconds:.0f} s")
        t0 = time.time()
        _pace([(producers[r.collection_id], r) for r in records], seconds, rate)
        t1 = time.time()
        proxy.sender.flush(60)
        wm = broker.watermarks()
        try:
            until = {p: wm.high(p) for p in pchannels}
        finally:
            wm.close()
        say(f"reference, {n} vchannel(s): load done; waiting up to {drain:.0f} s for the last commits")
        ref.wait_reached(until, drain)
        stats = window(ref.sampler.samples, t0, t1)
    finally:
        stop.set()
        if ref is not None:
            ref.stop()
        if proxy is not None:
            proxy.close()
        kafka.stop()
    sent = [(cid, s.topic, s.offset, s.t) for cid, p in producers.items() for s in p.sent
            if s.rows and t0 <= s.t <= t1]
    lats, missing = durable_latencies(spec.checkpoint, spec.root, sent)
    rows = sum(table_rows(table_path(spec.root, r.collection_id)) for r in records)
    inserts = sum(1 for p in producers.values() for s in p.sent if s.rows)
    batches = [e for e in ref.events() if e["ev"] == "batch" and t0 <= e["t0"] <= t1]
    commits = sum(1 for r in records for t in table_commits(table_path(spec.root, r.collection_id)).values()
                  if t0 <= t <= t1)
    return ScaleReference(n, len(records), t1 - t0, inserts, stats.cores,
                          (stats.cores_driver, stats.cores_jvm, stats.cores_workers), stats.cores_broker,
                          stats.cores_machine, stats.total_rss_peak, lats, missing, inserts * ROWS, rows,
                          len(batches),
                          lat.percentile([e["t1"] - e["t0"] for e in batches], 50) if batches else None,
                          commits / (t1 - t0))


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# command line: one point on a broker of its own, a small table

def _fmt_lat(lats: list[float]) -> str:
    if not lats:
        return "- / -"
    return f"{lat.percentile(lats, 50):.2f} / {lat.percentile(lats, 99):.2f}"


def _busy_point(args) -> list[list]:
    """One busy vchannel: a 1x backlog (and ``--factor`` x), then a steady load."""
    from deltanode.mq.broker import Broker
    from deltanode.standalone.kafka_server import EmbeddedKafka

    from .workload import ROWS_PER_MESSAGE, make_collection
    kafka = EmbeddedKafka(os.path.join(args.work, "kafka"))
    kafka.start()
    rows = []
    try:
        broker = Broker("kafka", kafka.bootstrap_servers)
        coll = make_collection(broker, int(time.time()) % 100000 * 10, args.dim, 1)
        try:
            for k, factor in enumerate([1] + ([args.factor] if args.factor > 1 else [])):
                first = len(coll.producer.sent)
                say(f"producing a {factor}x backlog: {args.messages * factor} messages of {ROWS_PER_MESSAGE} rows, "
                    f"dim {args.dim}")
                coll.produce_backlog(args.messages * factor)
                targets = coll.settled_targets()
                sent = [s for s in coll.producer.sent[first:] if s.offset >= 0]
                size = max(s.size for s in sent if s.rows)
                start = min(s.offset for s in sent)
                starting = json.dumps({coll.pchannels[0]: {"0": start}})
                say(f"reference on the {factor}x backlog")
                r = run_backlog(kafka.bootstrap_servers, [coll], {coll.pchannels[0]: targets[coll.vchannels[0]]},
                                os.path.join(args.work, f"backlog-{k}"), label=f"{factor}x", message_bytes=size,
                                sent=sent, starting_offsets=starting, broker_pid=kafka.proc.pid,
                                rows_produced=sum(s.rows for s in sent), fanout=args.fanout,
                                c1_only=args.c1_only, write_threads=args.write_threads,
                                vector_as=args.vector_as, decode=args.decode)
                rows.append([r.label, f"{r.bytes / 1e6:.0f}", f"{r.mb_per_s:.1f}", f"{r.mb_per_s_total:.1f}", "-",
                             _c(r.cores), _c(r.cores_broker), _m(r.peak_rss), r.batches, r.rows_produced,
                             r.rows_in_delta])
            if args.steady_seconds > 0:
                size = max(s.size for s in coll.producer.sent if s.rows)
                say(f"reference at a steady {args.steady_mb_s} MB/s for {args.steady_seconds:.0f} s")
                r = run_steady(kafka.bootstrap_servers, coll, os.path.join(args.work, "steady"),
                               mb_s=args.steady_mb_s, seconds=args.steady_seconds, message_bytes=size,
                               broker_pid=kafka.proc.pid, fanout=args.fanout, c1_only=args.c1_only,
                               vector_as=args.vector_as, decode=args.decode)
                rows.append(["steady", f"{r.bytes / 1e6:.0f}", f"{r.mb_per_s:.1f}", "-", _fmt_lat(r.latencies),
                             _c(r.cores), _c(r.cores_broker), _m(r.peak_rss), r.batches, r.rows_produced,
                             r.rows_in_delta])
        finally:
            coll.close()
    finally:
        kafka.stop()
    return rows


def _c(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _m(x: int | None) -> str:
    return "-" if x is None else f"{x / (1 << 20):.0f}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "child":
        child(Spec(**json.loads(argv[1])))
        return 0
    import tempfile

    from .report import table
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.structured_streaming",
                                description="Run the Structured Streaming reference on a broker of its own.")
    p.add_argument("what", choices=["busy", "scale"])
    p.add_argument("--work", help="work directory (default: a temporary one, kept)")
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--messages", type=int, default=30, help="busy: InsertRequests of 1,000 rows in the 1x backlog")
    p.add_argument("--factor", type=int, default=0, help="busy: also a backlog this many times larger")
    p.add_argument("--steady-mb-s", type=float, default=10.0)
    p.add_argument("--steady-seconds", type=float, default=20.0, help="busy: 0 skips the steady load")
    p.add_argument("--vchannels", default="16", help="scale: comma-separated points")
    p.add_argument("--seconds", type=float, default=30.0, help="scale: load duration")
    p.add_argument("--drain", type=float, default=120.0)
    p.add_argument("--write-threads", type=int, default=4)
    p.add_argument("--max-offsets", type=int, default=0, help="scale: maxOffsetsPerTrigger (0: from 256 MB)")
    p.add_argument("--fanout", choices=["auto", "cache"], default="auto")
    p.add_argument("--c2", dest="c1_only", action="store_false",
                   help="the JVM's default compilers (C1 and C2) instead of C1 only")
    p.add_argument("--vector-as", choices=["array", "binary"], default="array",
                   help="FloatVector column type: array<float> (as DeltaNode) or binary (as Milvus's binlogs)")
    p.add_argument("--decode", choices=["python", "jvm"], default=Spec.decode,
                   help="decode Milvus's messages in Python workers (mapInArrow) or in the JVM (Java UDFs, Spark SQL)")
    args = p.parse_args(argv)
    args.work = args.work or tempfile.mkdtemp(prefix="sss-reference-")
    say(f"work dir {args.work}")
    if args.what == "busy":
        rows = _busy_point(args)
        print(table(["run", "wire MB", "MB/s (query)", "MB/s (incl. start)", "p50 / p99 s", "cores", "broker cores",
                     "peak RSS MiB", "batches", "rows produced", "rows in Delta"], rows))
    else:
        rows = []
        for n in [int(x) for x in args.vchannels.split(",")]:
            r = run_scale(n, os.path.join(args.work, f"scale-{n}"), seconds=args.seconds, drain=args.drain,
                          write_threads=args.write_threads, max_offsets=args.max_offsets or None,
                          fanout=args.fanout, c1_only=args.c1_only, vector_as=args.vector_as,
                          decode=args.decode)
            rows.append([n, r.collections, f"{r.inserts / r.seconds:.0f}", _c(r.cores),
                         " / ".join(_c(c) for c in r.cores_split), _c(r.cores_broker), _c(r.cores_machine),
                         _m(r.rss_peak), _fmt_lat(r.latencies),
                         f"{max(r.latencies):.2f}" if r.latencies else "-", r.batches,
                         _c(r.batch_seconds_median), f"{r.commits_per_s:.1f}", r.rows_produced, r.rows_in_delta,
                         r.not_durable])
        print(table(["vchannels", "collections", "inserts/s", "cores", "driver / JVM / workers", "broker cores",
                     "machine cores", "peak RSS MiB", "p50 / p99 s", "max s", "batches", "median batch s",
                     "commits/s", "rows produced", "rows in Delta", "inserts not durable"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
