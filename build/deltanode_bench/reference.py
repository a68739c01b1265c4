"""The reference point: one plain Python process, no Spark.

``python -m deltanode_bench.reference SPEC_JSON`` consumes each channel's position range with
the broker's own client (Kafka: confluent-kafka with the DataNode's consumer settings; Pulsar:
a pulsar-client reader with the DataNode's receiver queue, or 1 on pulsar-lite, which needs it to
deliver exactly: docs/pulsar.md), decodes with the DataNode's own decoder (``flowgraph.decode.parse`` /
``insert_columns``) and writes the insert_log columns to one parquet file per vchannel with the
binlog writer's settings (snappy, statistics and dictionary on the system columns only). It
prints one JSON line: bytes, rows, messages and seconds per stage, per channel.

It does not use the DataNode's range readers (``mq.kafka.read_ranges`` asks ``consume()`` for
64 messages with a 0.5 s timeout, so the tail of every range waits for messages past its end);
the reference asks for at most the messages left in the range.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator

from .datanode_run import PYTHONPATH

SYSTEM_STATS = ["_ts", "_row_id", "_segment_id", "_partition_id"]
STALL_S = 60


def kafka_chunks(bootstrap: str, topic: str, start: int, end: int) -> Iterator[list[bytes]]:
    """The values of offsets [start, end) of ``topic``, in chunks of at most 64."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "deltanode-bench-reference",
                         "enable.auto.commit": False, "auto.offset.reset": "error",
                         "fetch.max.bytes": 32 << 20, "max.partition.fetch.bytes": 16 << 20,
                         "queued.max.messages.kbytes": 32 << 10, "fetch.wait.max.ms": 20})
    consumer.assign([TopicPartition(topic, 0, start)])
    next_offset, last_progress = start, time.monotonic()
    try:
        while next_offset < end:
            if time.monotonic() - last_progress > STALL_S:
                raise RuntimeError(f"no data from {topic} at offset {next_offset} for {STALL_S} s "
                                   f"(range ends at {end})")
            chunk = []
            for m in consumer.consume(num_messages=min(64, end - next_offset), timeout=0.5):
                if m.error() is not None:
                    if m.error().retriable():
                        continue
                    raise RuntimeError(f"reading {topic}: {m.error()}")
                if m.offset() < end:
                    chunk.append(m.value())
                next_offset = m.offset() + 1
                last_progress = time.monotonic()
            yield chunk
    finally:
        consumer.close()


def pulsar_chunks(service_url: str, topic: str, start: int, end: int, queue: int) -> Iterator[list[bytes]]:
    """The values of positions [start, end) of ``topic``, one message at a time (a repeat the
    broker delivers is dropped, as the DataNode drops it); ``queue``: the reader's receiver queue."""
    import pulsar

    from deltanode.mq.pulsar import message_id, position, topic_name
    client = pulsar.Client(service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    first = message_id(start) if start > 0 else pulsar.MessageId.earliest
    reader = client.create_reader(topic_name(topic), first, receiver_queue_size=queue,
                                  start_message_id_inclusive=True)
    last = start - 1
    try:
        while last < end - 1:
            try:
                msg = reader.read_next(STALL_S * 1000)
            except pulsar.Timeout:
                raise RuntimeError(f"no data from {topic} after position {last} for {STALL_S} s "
                                   f"(range ends at {end})") from None
            pos = position(msg.message_id().ledger_id(), msg.message_id().entry_id())
            if pos <= last:
                continue
            last = pos
            yield [msg.data()] if pos < end else []
    finally:
        reader.close()
        client.close()


def run_channel(mq: str, address: str, ch: dict, out_dir: str, queue: int) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pymilvus.grpc_gen import schema_pb2

    from deltanode.executor import decode
    from deltanode.wire.schema import CollectionLayout

    layout = CollectionLayout.from_proto(schema_pb2.CollectionSchema.FromString(base64.b64decode(ch["schema_b64"])))
    schema = layout.insert_schema()
    path = os.path.join(out_dir, f"{ch['vchannel']}.parquet")
    t_consume = t_decode = t_write = 0.0
    messages = nbytes = rows = 0
    t0 = time.perf_counter()
    writer = pq.ParquetWriter(path, schema, compression="snappy", write_statistics=SYSTEM_STATS,
                              use_dictionary=SYSTEM_STATS)
    chunks = pulsar_chunks(address, ch["topic"], ch["start"], ch["end"], queue) if mq == "pulsar" else \
        kafka_chunks(address, ch["topic"], ch["start"], ch["end"])
    while True:
        a = time.perf_counter()
        chunk = next(chunks, None)
        t_consume += time.perf_counter() - a
        if chunk is None:
            break
        for value in chunk:
            messages += 1
            nbytes += len(value or b"")
            a = time.perf_counter()
            msg_type, msg = decode.parse(value)
            if msg_type != decode.MsgType.Insert or msg.shardName != ch["vchannel"]:
                t_decode += time.perf_counter() - a
                continue
            cols, n = decode.insert_columns(layout, msg)
            cols.append(pa.array(np.full(n, msg.segmentID, dtype=np.int64)))
            cols.append(pa.array(np.full(n, msg.partitionID, dtype=np.int64)))
            batch = pa.RecordBatch.from_arrays(cols, schema=schema)
            b = time.perf_counter()
            writer.write_batch(batch)
            c = time.perf_counter()
            t_decode += b - a
            t_write += c - b
            rows += n
    a = time.perf_counter()
    writer.close()
    t_write += time.perf_counter() - a
    return {"vchannel": ch["vchannel"], "messages": messages, "bytes": nbytes, "rows": rows,
            "seconds": time.perf_counter() - t0, "consume": t_consume, "decode": t_decode, "write": t_write,
            "parquet_bytes": os.path.getsize(path)}


def child(args: dict) -> dict:
    os.makedirs(args["out_dir"], exist_ok=True)
    t0 = time.perf_counter()
    channels = [run_channel(args["mq"], args["address"], ch, args["out_dir"], args["queue"]) for ch in args["channels"]]
    return {"channels": channels, "seconds": time.perf_counter() - t0,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def run(mq: str, address: str, channels: list[dict], out_dir: str, queue: int, timeout: float = 600) -> dict:
    """Run the reference in a process of its own; returns its JSON result."""
    env = dict(os.environ, PYTHONPATH=PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", ""))
    spec = {"mq": mq, "address": address, "channels": channels, "out_dir": out_dir, "queue": queue}
    os.makedirs(out_dir, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "deltanode_bench.reference", json.dumps(spec)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=out_dir, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"reference process failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(child(json.loads(sys.argv[1]))))
