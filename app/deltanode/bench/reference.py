"""The reference point: one plain Python process, no Spark.

``python -m deltanode.bench.reference SPEC_JSON`` consumes each channel's offset range with
the DataNode's own consumer (``mq.kafka.read_range``), decodes with the DataNode's own
decoder (``flowgraph.decode.parse`` / ``insert_columns``) and writes the insert_log
columns to one parquet file per vchannel with the binlog writer's settings (snappy,
statistics and dictionary on the system columns only). It prints one JSON line: bytes,
rows, messages and seconds per stage, per channel.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import subprocess
import sys
import time

APP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SYSTEM_STATS = ["_ts", "_row_id", "_segment_id", "_partition_id"]


def run_channel(bootstrap: str, ch: dict, out_dir: str) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pymilvus.grpc_gen import schema_pb2

    from ..flowgraph import decode
    from ..mq.kafka import read_range
    from ..wire.schema import CollectionLayout

    layout = CollectionLayout.from_proto(schema_pb2.CollectionSchema.FromString(base64.b64decode(ch["schema_b64"])))
    schema = layout.insert_schema()
    path = os.path.join(out_dir, f"{ch['vchannel']}.parquet")
    t_consume = t_decode = t_write = 0.0
    messages = nbytes = rows = 0
    t0 = time.perf_counter()
    writer = pq.ParquetWriter(path, schema, compression="snappy", write_statistics=SYSTEM_STATS,
                              use_dictionary=SYSTEM_STATS)
    it = read_range(bootstrap, ch["topic"], 0, ch["start"], ch["end"])
    while True:
        a = time.perf_counter()
        chunk = next(it, None)
        b = time.perf_counter()
        t_consume += b - a
        if chunk is None:
            break
        for _offset, value in chunk:
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
    channels = [run_channel(args["bootstrap"], ch, args["out_dir"]) for ch in args["channels"]]
    return {"channels": channels, "seconds": time.perf_counter() - t0,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def run(bootstrap: str, channels: list[dict], out_dir: str, timeout: float = 600) -> dict:
    """Run the reference in a process of its own; returns its JSON result."""
    env = dict(os.environ, PYTHONPATH=APP + os.pathsep + os.environ.get("PYTHONPATH", ""))
    spec = {"bootstrap": bootstrap, "channels": channels, "out_dir": out_dir}
    proc = subprocess.run([sys.executable, "-m", "deltanode.bench.reference", json.dumps(spec)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=APP)
    if proc.returncode != 0:
        raise RuntimeError(f"reference process failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(child(json.loads(sys.argv[1]))))
