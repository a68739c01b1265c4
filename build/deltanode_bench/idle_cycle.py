"""The driver's CPU for a cycle of idle vchannels, in one process (no Spark, no broker).

``python -m deltanode_bench.idle_cycle [--vchannels 10000] [--cycles 20] [--busy N] [--work-dir DIR]
[--profile]``: loads that many flowgraphs (collections of 2 shards over 16 pchannels, as the
scale benchmark's), then runs cycles through the pipeline's own ``CycleRunner``: each pchannel
got 5 TimeTicks since the last cycle and no vchannel a message of its own, but ``--busy`` of
them (drawn anew each cycle), which each got one insert of 50 rows (a binlog file the commit
adds; the file itself is not written). The Spark job is replaced by its
driver side: the task specs pickled as the job pickles them, and outputs (the ranges' read
statistics) unpickled as the job's results are; the collector set as on the driver. Prints
the median of planning the ranges (wall), and the CPU per cycle of planning (``start``, the
specs pickled), of applying the outputs (``finish``) and of the sync (``SyncManager.sync``:
the idle-checkpoint commits the sync policies pick and the busy vchannels', to Delta tables in a
scratch directory, or under ``--work-dir``, kept: deleting many files slows the next ones);
``--profile`` adds cProfile's top
functions (of the loop's thread). What a cycle costs for every vchannel a node holds, whatever the
traffic: at 10,000 vchannels, the fixed part of a cycle (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import cProfile
import pickle
import pstats
import random
import statistics
import tempfile
import threading
import time

from deltanode.config.sections.pipeline import Limits, SealSettings, SyncSettings
from deltanode.delta.layout import StorageLayout
from deltanode.driver_gc import tune_for_driver
from deltanode.mq.broker import Broker
from deltanode.pipeline.cycle import CycleRunner
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.registry import VchannelRegistry
from deltanode.pipeline.sync_manager import SyncManager
from deltanode.pipeline.vchannel_stops import VchannelStops
from deltanode.records import FileEntry, Portion, PortionStats, ReadStats, SegmentStats, TableKind, TaskOutput, TaskSpec
from deltanode.state.commit import Watermarks
from deltanode.vchannel.flowgraph import VchannelFlowgraph
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import schema_from_json

from .workload import bench_schema

PCHANNELS, TICKS = 16, 5


class _Highs:
    """The broker's high watermarks as the runner asks for them: ``TICKS`` more each cycle."""

    def __init__(self) -> None:
        self.high = 1

    def highs(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {key: self.high for key in keys}


class _IdleRunner(CycleRunner):
    """The cycle runner with the Spark job's driver side only: specs pickled, outputs unpickled;
    ``busy`` vchannels a cycle get one insert each."""

    busy = 0
    drawn = random.Random(24)

    def _run_tasks(self, specs: list[TaskSpec]) -> tuple[list[TaskOutput], list]:
        for spec in specs:
            pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
        names = sorted({v for spec in specs for p in spec.pieces for v in p.members})
        busy = set(self.drawn.sample(names, min(self.busy, len(names))))
        outputs = []
        for spec in specs:
            starts = dict(zip(spec.contexts.vchannels, spec.contexts.starts))
            ids = dict(zip(spec.contexts.vchannels, spec.contexts.collection_ids))
            portions = [_insert(v, ids[v], max(p.first, starts[v]), p.end)
                        for p in spec.pieces for v in p.members if v in busy]
            reads = tuple(ReadStats(p.pchannel, p.first, p.end, messages=p.end - p.first, bytes=60 * (p.end - p.first),
                                    tick=1 << 40 | p.end, tick_offset=p.end - 1, partition=p.partition,
                                    routed=frozenset(v for v in p.members if v in busy))
                          for p in spec.pieces)
            outputs.append(pickle.dumps(TaskOutput(tuple(portions), reads), protocol=pickle.HIGHEST_PROTOCOL))
        return [pickle.loads(out) for out in outputs], []


def _insert(vchannel: str, collection_id: int, first: int, end: int) -> Portion:
    """One insert of 50 rows of 128 dims into the vchannel's segment, as a task returns it."""
    segment, ts = collection_id * 10 + int(vchannel[-1]), 1 << 40 | first
    entry = FileEntry(TableKind.INSERT, f"{collection_id}/{segment}/part-{vchannel[-12:]}-{first}.parquet", 26_000, 50,
                      "{}", segment, 1)
    return Portion(vchannel, first, end, (entry,), {segment: SegmentStats(1, 50, ts, ts, first, ts, 26_000)},
                   stats=PortionStats(1 << 40 | end, 1, 26_000, 50))


def flowgraphs(vchannels: int) -> dict[str, VchannelFlowgraph]:
    doc = bench_schema(128)
    del doc["fields"][1]   # pk and the vector, as the scale benchmark's collections
    out = {}
    for c in range(vchannels // 2):
        cid = 1000 + c
        schema = schema_from_json(doc, f"scale{c}")
        for k in range(2):
            v = vchannel_name(pchannel_name("by-dev-rootcoord-dml", (2 * c + k) % PCHANNELS), cid, k)
            info = VchannelInfo(collectionID=cid, channelName=v)
            info.seek_position.msgID = CODECS["kafka"].to_msg_id(1)
            fg = out[v] = VchannelFlowgraph(info, schema, node_id=1)
            fg.load(None, Watermarks(), time.monotonic())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vchannels", type=int, default=10000)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--busy", type=int, default=0, help="vchannels with one insert each, each cycle")
    ap.add_argument("--work-dir", help="keep the Delta tables here (default: a scratch directory, deleted)")
    ap.add_argument("--profile", action="store_true", help="cProfile's top functions over the cycles")
    args = ap.parse_args()
    tune_for_driver()   # the driver's collector thresholds
    registry = VchannelRegistry()
    for fg in flowgraphs(args.vchannels).values():
        registry.add(fg)
    with tempfile.TemporaryDirectory() as scratch:
        storage = StorageLayout(args.work_dir or scratch)
        failures = VchannelStops(storage=storage, fence=None, load=lambda fg: None, forget_topic=lambda pchannel: None)
        runner = _IdleRunner(sc=None, storage=storage, broker=Broker("kafka", "127.0.0.1:1"),  # type: ignore[arg-type]
                             limits=Limits(), seal=SealSettings(), registry=registry, failures=failures, flushes=dict,
                             stopping=threading.Event())
        highs = runner.watermarks = _Highs()   # type: ignore[assignment]
        runner.busy = args.busy
        syncs = SyncManager(sc=None, storage=storage, settings=SyncSettings(), fence=None,  # type: ignore[arg-type]
                            fail=lambda *a, **k: None, new_collection_files=16, max_tasks=2)
        profile = cProfile.Profile() if args.profile else None
        ranges, plans, applies, synced = [], [], [], []
        for n in range(1, args.cycles + 1):
            highs.high += TICKS
            members = registry.begin_cycle()
            report = CycleReport(n)
            if profile is not None:
                profile.enable()
            started = time.process_time()
            launched = runner.start(members, report, time.monotonic())
            assert launched.job is not None
            launched.job.result()
            planned = time.process_time()
            runner.finish(launched, members, report)
            applied = time.process_time()
            syncs.sync(members, time.monotonic(), report)
            synced.append(time.process_time() - applied)
            if profile is not None:
                profile.disable()
            registry.end_cycle()
            ranges.append(report.plan_s)
            plans.append(planned - started)
            applies.append(applied - planned)
        runner.close()
    behind = sum(fg.next_offset != highs.high for fg in registry.members().values())
    print(f"{args.vchannels} vchannels ({args.busy} with an insert a cycle, the others idle) on {PCHANNELS} "
          f"pchannels, {args.cycles} cycles "
          f"({behind} vchannels not at the head after them)")
    print("  ranges planned (wall) ms  plan (start, specs pickled) ms  apply (outputs unpickled, finish) ms"
          "  sync ms  cycle ms")
    print("  ------------------------  ------------------------------  -----------------------------------"
          "  -------  --------")
    cycles = [p + a + s for p, a, s in zip(plans, applies, synced)]
    print(f"  {1000 * statistics.median(ranges):24.1f}  {1000 * statistics.median(plans):30.1f}  "
          f"{1000 * statistics.median(applies):35.1f}  {1000 * statistics.median(synced):7.1f}  "
          f"{1000 * statistics.median(cycles):8.1f}")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
