"""The floor: the least CPU a cycle's inserts can cost on this machine, beside DeltaNode's own.

``PYTHONPATH=app:build .venv/bin/python -m deltanode_bench.floor [--shape 1000|10000] [--runs 3]``
builds the messages of one task's cycle at a scale point (``task_cpu.messages``: collections of 2
shards over 8 pchannels, InsertRequests of 50 rows x 128-dim, TimeTicks) and handles them twice,
alternating, in this one process:

- **DeltaNode**: the executor's path, as ``pipeline.task`` runs it (``task_cpu.run``: dispatcher,
  routers, binlog files).
- **The floor**: only what any design must do with the same bytes, written as tightly as Python,
  numpy and pyarrow allow here. Each message's bytes are read once, straight from the protobuf
  wire format: its type, vchannel and columns, the varints decoded in bulk by numpy, and the
  vector's packed floats taken where they lie. Then one Parquet file per vchannel with inserts,
  holding DeltaNode's columns (pk, vec, _ts, _row_id, _segment_id, _partition_id), encoded by the
  tightest encoder here (DeltaNode's own ``executor.plain_parquet``: a page a column, PLAIN, no
  compression, no statistics) and written with one system call. Then one commit file per
  collection, naming its files. When DeltaNode fsyncs (``storage.fsync``, its default), the floor
  fsyncs its files, their directories and its commit files too.

It prints the CPU of each per insert and their ratio, DeltaNode / floor: the figure to drive down.
The floor's commits are a driver's work, printed apart: DeltaNode's column here is its tasks only.
The floor leaves out what DeltaNode does beyond that: statistics and the bloom filter, checkpoints,
the replay filter and the time-tick rules, the commit's conditions. So "DeltaNode / floor" is the
price of all of those at once.
"""

from __future__ import annotations

import argparse
import ctypes
import enum
import functools
import json
import os
import shutil
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from deltanode.delta import durable
from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import StoreOptions
from deltanode.executor.plain_parquet import PlainEncoder, for_schema
from deltanode.records import RouteContext
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.schema import CollectionLayout
from deltanode.wire.varint import read_varint

from . import task_cpu


class Durability(enum.Enum):
    """How the floor makes its files durable."""

    NONE = "none"       # storage.fsync = false
    FSYNC = "fsync"     # each file, then each directory once, then each commit file and its directory: DeltaNode's way
    SYNCFS = "syncfs"   # one syncfs(2) of the filesystem for the cycle's files, one for its commits


SHAPES = (1000, 10000)   # the scale points the targets name
CYCLE_S = 2.0            # a cycle's length at those points on this machine (docs/benchmarks.md)


def shape_of(vchannels: int, rate_cap: float = 1000.0, cycle_s: float = CYCLE_S) -> tuple[int, int, int]:
    """One task's cycle at a scale point (two tasks a cycle, collections of 2 shards, an insert a
    second per vchannel up to ``rate_cap`` in all): its collections, the inserts of each busy
    vchannel, and its collections with inserts. At 1,000 vchannels: 250, 2, 250; at 10,000, where
    each vchannel has an insert every 10 s: 2,500, 1, 500."""
    collections = max(1, vchannels // 4)
    per_cycle = min(1.0, rate_cap / vchannels) * cycle_s   # inserts a vchannel in a cycle
    if per_cycle >= 1:
        return collections, round(per_cycle), collections
    return collections, 1, max(1, round(collections * per_cycle))


def _number(message, field: str) -> int:
    """A field's number, from Milvus's own generated descriptors (not written out here again)."""
    return message.DESCRIPTOR.fields_by_name[field].number


# The field numbers the floor reads: msg.proto's InsertRequest, common.proto's MsgBase, schema.proto's FieldData.
BASE, MSG_TYPE = _number(msg_pb2.InsertRequest, "base"), _number(common_pb2.MsgBase, "msg_type")
SHARD, COLLECTION = _number(msg_pb2.InsertRequest, "shardName"), _number(msg_pb2.InsertRequest, "collectionID")
PARTITION, SEGMENT = _number(msg_pb2.InsertRequest, "partitionID"), _number(msg_pb2.InsertRequest, "segmentID")
TIMESTAMPS, ROW_IDS = _number(msg_pb2.InsertRequest, "timestamps"), _number(msg_pb2.InsertRequest, "rowIDs")
FIELDS_DATA = _number(msg_pb2.InsertRequest, "fields_data")
SCALARS, VECTORS = _number(schema_pb2.FieldData, "scalars"), _number(schema_pb2.FieldData, "vectors")
LONG_DATA, FLOAT_VECTOR = _number(schema_pb2.ScalarField, "long_data"), _number(schema_pb2.VectorField, "float_vector")
DATA = _number(schema_pb2.LongArray, "data")   # and FloatArray's


def _walk(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int | tuple[int, int]]]:
    """The fields between ``start`` and ``end``, in order: (number, a varint's value or the span of a
    length-delimited field); fixed-width fields are skipped."""
    pos = start
    while pos < end:
        key, pos = read_varint(buf, pos)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, pos = read_varint(buf, pos)
            yield number, value
        elif kind == 2:
            n, pos = read_varint(buf, pos)
            yield number, (pos, pos + n)
            pos += n
        elif kind in (1, 5):
            pos += 8 if kind == 1 else 4
        else:
            raise ValueError(f"wire type {kind} at {pos}")


def _fields(buf: bytes, span: tuple[int, int]) -> dict[int, Any]:
    """The fields of the message at ``span``, the first occurrence of each: the floor's messages
    repeat only packed scalars, and ``fields_data`` (read with ``_walk``)."""
    out: dict[int, Any] = {}
    for number, value in _walk(buf, *span):
        out.setdefault(number, value)
    return out


def varints(buf: bytes, start: int, end: int) -> np.ndarray:
    """The packed varints between ``start`` and ``end``, decoded at once (int64)."""
    b = np.frombuffer(buf, np.uint8, end - start, start)
    last = np.flatnonzero(b < 0x80)
    firsts = np.empty_like(last)
    firsts[0] = 0
    firsts[1:] = last[:-1] + 1
    shifts = (np.arange(len(b)) - np.repeat(firsts, last - firsts + 1)).astype(np.uint64) * np.uint64(7)
    return np.add.reduceat((b & 0x7F).astype(np.uint64) << shifts, firsts).view(np.int64)


@dataclass
class _Batch:
    """One vchannel's inserts of the cycle, as columns."""

    pk: list[np.ndarray]
    vec: list[np.ndarray]
    ts: list[np.ndarray]
    row_id: list[np.ndarray]
    segment: list[int]
    partition: list[int]
    rows: list[int]


def _read(value: bytes, batches: dict[str, _Batch], collection_of: dict[str, int]) -> None:
    top = _fields(value, (0, len(value)))
    if _fields(value, top[BASE]).get(MSG_TYPE) != common_pb2.Insert:
        return   # a TimeTick: read, nothing to write
    s, e = top[SHARD]
    vchannel = value[s:e].decode()
    batch = batches.get(vchannel)
    if batch is None:
        batch = batches[vchannel] = _Batch([], [], [], [], [], [], [])
        collection_of[vchannel] = top[COLLECTION]
    ts = varints(value, *top[TIMESTAMPS])
    batch.ts.append(ts)
    batch.row_id.append(varints(value, *top[ROW_IDS]))
    batch.segment.append(top[SEGMENT])
    batch.partition.append(top[PARTITION])
    batch.rows.append(len(ts))
    for number, span in _walk(value, 0, len(value)):
        if number != FIELDS_DATA:
            continue
        field = _fields(value, span)
        if SCALARS in field:
            longs = _fields(value, field[SCALARS])[LONG_DATA]
            batch.pk.append(varints(value, *_fields(value, longs)[DATA]))
        else:
            ds, de = _fields(value, _fields(value, field[VECTORS])[FLOAT_VECTOR])[DATA]
            batch.vec.append(np.frombuffer(value, np.float32, (de - ds) // 4, ds))


def _syncfs(path: str) -> None:
    """syncfs(2) of the filesystem holding ``path``: every dirty page and name on it made durable at
    once (it reports a writeback error since Linux 5.8). Python has no binding: libc's, by ctypes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), f"syncfs {path}")
    finally:
        os.close(fd)


SCHEMA = pa.schema([("pk", pa.int64()), ("vec", pa.list_(pa.float32())), ("_ts", pa.int64()), ("_row_id", pa.int64()),
                    ("_segment_id", pa.int64()), ("_partition_id", pa.int64())])


@functools.cache
def _encoder() -> PlainEncoder:
    encoder = for_schema(SCHEMA)
    assert encoder is not None
    return encoder


def _create(path: str, data: bytes, fsync: bool) -> None:
    """A new file at ``path`` holding ``data``, in one write; its data fsynced with ``fsync``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _write(root: str, rel: str, batch: _Batch, dim: int, fsync: bool) -> dict:
    """The batch as one Parquet file at ``rel``: the tightest encoder here (DeltaNode's own
    ``plain_parquet``, a third of pyarrow's writer for a small file), one write; its add action."""
    rows = sum(batch.rows)
    columns = [pa.array(np.concatenate(batch.pk)),
               pa.ListArray.from_arrays(pa.array(np.arange(0, rows * dim + 1, dim, dtype=np.int32)),
                                        pa.array(np.concatenate(batch.vec))),
               pa.array(np.concatenate(batch.ts)), pa.array(np.concatenate(batch.row_id)),
               pa.array(np.repeat(np.array(batch.segment, np.int64), batch.rows)),
               pa.array(np.repeat(np.array(batch.partition, np.int64), batch.rows))]
    data = _encoder().encode_columns(columns, rows)
    assert data is not None
    _create(os.path.join(root, rel), data, fsync)
    return {"add": {"path": rel, "size": len(data), "dataChange": True, "stats": json.dumps({"numRecords": rows})}}


@dataclass(frozen=True, kw_only=True)
class FloorCpu:
    """CPU seconds of a floor cycle: reading and writing files (a task's share), and committing (a driver's)."""

    files: float
    commits: float


def floor_run(root: str, msgs: dict[int, list[bytes]], layouts: dict[int, CollectionLayout], version: int,
              durability: Durability = Durability.FSYNC) -> FloorCpu:
    """The floor's cycle over ``msgs``: read, one file per vchannel with inserts, one commit per collection."""
    fsync = durability is Durability.FSYNC
    started = time.process_time()
    batches: dict[str, _Batch] = {}
    collection_of: dict[str, int] = {}
    for values in msgs.values():
        for value in values:
            _read(value, batches, collection_of)
    adds: dict[int, list[dict]] = defaultdict(list)
    dirs: list[str] = []
    for vchannel, batch in batches.items():
        collection = collection_of[vchannel]
        rel_dir = f"insert_log/{collection}/{vchannel}"
        if version == 0:
            os.makedirs(os.path.join(root, rel_dir), exist_ok=True)
        adds[collection].append(_write(root, f"{rel_dir}/part-{uuid.uuid4().hex}.parquet", batch,
                                       layouts[collection].fields[1].dim or 0, fsync))
        dirs.append(os.path.join(root, rel_dir))
    if fsync:
        for d in dirs:
            durable.sync_dir(d)
    elif durability is Durability.SYNCFS:
        _syncfs(root)
    files = time.process_time()
    for collection, actions in adds.items():
        log_dir = os.path.join(root, "insert_log", str(collection), "_delta_log")
        if version == 0:
            os.makedirs(log_dir, exist_ok=True)
        body = "\n".join(json.dumps(a) for a in [*actions, {"commitInfo": {"operation": "WRITE"}}]).encode()
        _create(os.path.join(log_dir, f"{version:020d}.json"), body, fsync)
        if fsync:
            durable.sync_dir(log_dir)
    if durability is Durability.SYNCFS:
        _syncfs(root)
    return FloorCpu(files=files - started, commits=time.process_time() - files)


Messages = dict[int, list[bytes]]   # per pchannel, its messages' bytes in offset order


def shaped(vchannels: int, rate_cap: float = 1000.0
           ) -> tuple[Messages, dict[str, tuple[int, RouteContext]], dict[int, CollectionLayout], int]:
    """One task's messages of a cycle at the ``vchannels`` point (``shape_of``); and its inserts."""
    collections, inserts, busy = shape_of(vchannels, rate_cap)
    msgs, contexts, layouts = task_cpu.messages(collections, inserts, busy=busy)
    return msgs, contexts, layouts, busy * 2 * inserts


def ms_per_insert(vchannels: int, rate_cap: float = 1000.0, runs: int = 5,
                  durability: Durability = Durability.FSYNC) -> float:
    """The floor's CPU an insert at the ``vchannels`` point, files and commits: best of ``runs`` warm
    cycles (the scale benchmark prints it beside the DataNode's)."""
    msgs, _contexts, layouts, inserts = shaped(vchannels, rate_cap)
    work = tempfile.mkdtemp(prefix="deltanode-floor-")
    try:
        cycles = [floor_run(work, msgs, layouts, i, durability) for i in range(runs + 1)][1:]
        return min(c.files + c.commits for c in cycles) * 1e3 / inserts
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", type=int, action="append", metavar="VCHANNELS",
                   help="the scale point's shape (repeatable; default 1000 and 10000)")
    p.add_argument("--runs", type=int, default=3, help="warm runs of each, alternating (default 3)")
    p.add_argument("--no-fsync", action="store_true", help="neither fsyncs (storage.fsync = false)")
    p.add_argument("--syncfs", action="store_true",
                   help="the floor makes a cycle's files durable with one syncfs(2), and its commits with another")
    args = p.parse_args(argv)
    print("One task's cycle at each scale point's shape, in this process; CPU ms an insert, best of the runs: "
          "DeltaNode's executor path (task_cpu) and the floor's reading and files beside it, then the floor's "
          "commits (a driver's work, not in DeltaNode's column)")
    print("shape  inserts  DeltaNode tasks  floor files  tasks / floor files  floor commits")
    for shape in args.shape or SHAPES:
        msgs, contexts, layouts, inserts = shaped(shape)
        work = tempfile.mkdtemp(prefix="deltanode-floor-")
        try:
            storage = StorageLayout(os.path.join(work, "deltanode"), StoreOptions(fsync=not args.no_fsync))
            floor_root = os.path.join(work, "floor")
            task_cpu.run(storage, msgs, contexts, layouts)   # cold passes: imports, caches, directories
            durability = (Durability.NONE if args.no_fsync else Durability.SYNCFS if args.syncfs
                          else Durability.FSYNC)
            floor_run(floor_root, msgs, layouts, 0, durability)
            ours: list[float] = []
            floors: list[FloorCpu] = []
            for i in range(args.runs):
                ours.append(task_cpu.run(storage, msgs, contexts, layouts))
                floors.append(floor_run(floor_root, msgs, layouts, i + 1, durability))
            best = min(ours) * 1e3 / inserts
            low = min(f.files for f in floors) * 1e3 / inserts
            commits = min(f.commits for f in floors) * 1e3 / inserts
            print(f"{shape:>5}  {inserts:>7}  {best:>15.3f}  {low:>11.3f}  {best / low:>19.2f}  {commits:>13.3f}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
