"""CPU of one cycle's executor work at the scale point, in one process (no Spark, no broker).

``python -m deltanode_bench.task_cpu [--collections 250] [--inserts 2] [--profile]``: builds
the messages a task of the 1,000-vchannel scale point reads (collections of 2 shards spread
over 8 pchannels, InsertRequests of 50 rows x 128-dim, a few TimeTicks), then routes and writes
them as ``pipeline.task`` does (dispatcher, routers, binlog files in a scratch directory), and
prints the CPU of the first (cold) pass and of warm runs; ``--profile`` adds cProfile's top
functions. The same messages and files every run, so two versions of the code compare side by side.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time

import numpy as np

from deltanode.delta.layout import StorageLayout
from deltanode.executor.contexts import TaskContexts
from deltanode.executor.dispatch import PchannelDispatcher
from deltanode.executor.route import VchannelRouter
from deltanode.mq.milvus_producer import field_data
from deltanode.records import ReadRange, RouteContext
from deltanode.wire.milvus_proto import common_pb2, msg_pb2
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.schema import CollectionLayout, schema_from_json

from .workload import bench_schema

PCHANNELS, ROWS, DIM = 8, 50, 128


def messages(collections: int, inserts: int, busy: int | None = None
             ) -> tuple[dict[int, list[bytes]], dict[str, tuple[int, RouteContext]], dict[int, CollectionLayout]]:
    """Per pchannel its messages; per vchannel its pchannel and routing context; the layouts.
    ``busy``: only the first ``busy`` collections have inserts (default all), the others are read
    for their TimeTicks only."""
    doc = bench_schema(DIM)
    del doc["fields"][1]   # pk and the vector, as the scale benchmark's collections
    rng = np.random.default_rng(1)
    out: dict[int, list[bytes]] = {p: [] for p in range(PCHANNELS)}
    contexts: dict[str, tuple[int, RouteContext]] = {}
    layouts: dict[int, CollectionLayout] = {}
    ts = 1 << 30
    for c in range(collections):
        cid = 1000 + c
        layout = layouts[cid] = CollectionLayout.from_proto(schema_from_json(doc, f"scale{c}"))
        vectors = msg_pb2.InsertRequest(fields_data=[field_data(layout.fields[1], ROWS, rng, 0)]).SerializeToString()
        for k in range(2):
            p = (2 * c + k) % PCHANNELS
            pchannel = pchannel_name("by-dev-rootcoord-dml", p)
            v = vchannel_name(pchannel, cid, k)
            contexts[v] = (p, RouteContext(v, cid, f"scale{c}", pchannel, 0, 0))
            for i in range(inserts if busy is None or c < busy else 0):
                ts += ROWS
                req = msg_pb2.InsertRequest(
                    base=common_pb2.MsgBase(msg_type=common_pb2.Insert, msgID=1, timestamp=ts, sourceID=1),
                    shardName=v, collection_name=f"scale{c}", collectionID=cid, partitionID=cid + 1 + k,
                    segmentID=cid + 1 + k, timestamps=range(ts - ROWS + 1, ts + 1), rowIDs=range(ts - ROWS + 1, ts + 1),
                    num_rows=ROWS, version=msg_pb2.ColumnBased)
                req.fields_data.extend([field_data(layout.fields[0], ROWS, rng, i * ROWS)])
                out[p].append(req.SerializeToString() + vectors)
    for p in range(PCHANNELS):
        for _ in range(10):
            ts += 1
            out[p].append(msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(
                msg_type=common_pb2.TimeTick, timestamp=ts, sourceID=1)).SerializeToString())
    return out, contexts, layouts


def run(storage: StorageLayout, msgs, contexts, layouts) -> float:
    """CPU seconds of routing and writing every pchannel's messages once."""
    started = time.process_time()
    for p, values in msgs.items():
        pchannel = pchannel_name("by-dev-rootcoord-dml", p)
        members = tuple(v for v, (q, _) in contexts.items() if q == p)
        dispatcher = PchannelDispatcher(
            ReadRange(pchannel, 0, 0, len(values), members), TaskContexts.of([contexts[v][1] for v in members]),
            lambda ctx, first, end: VchannelRouter(ctx, layouts[ctx.collection_id], storage, first, end))
        for offset, value in enumerate(values):
            dispatcher.on_message(offset, value)
        dispatcher.finish()
    return time.process_time() - started


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.task_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--collections", type=int, default=250, help="collections of 2 shards (default 250: one task's "
                                                                  "half of the 1,000-vchannel point)")
    p.add_argument("--inserts", type=int, default=2, help="inserts per vchannel (default 2: a cycle of ~2 s)")
    p.add_argument("--runs", type=int, default=3, help="warm runs to time (default 3)")
    p.add_argument("--profile", action="store_true", help="also print cProfile's top 25 functions")
    args = p.parse_args()
    msgs, contexts, layouts = messages(args.collections, args.inserts)
    work = tempfile.mkdtemp(prefix="deltanode-task-cpu-")
    try:
        storage = StorageLayout(work)
        cold = run(storage, msgs, contexts, layouts)   # the first pass pays imports, caches, directories
        times = [run(storage, msgs, contexts, layouts) for _ in range(args.runs)]
        total = sum(len(v) for v in msgs.values())
        print(f"{total} messages for {len(contexts)} vchannels ({len(contexts)} binlog files a run): "
              f"CPU of the first (cold) pass {cold:.3f} s, then per run {' / '.join(f'{t:.3f}' for t in times)} s, "
              f"best {min(times) * 1e3 / total:.3f} ms a message")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            run(storage, msgs, contexts, layouts)
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
