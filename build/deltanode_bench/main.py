"""DeltaNode benchmark: ``build/bench.sh [options]``.

For each vector dim (``--dims``), on a fresh collection with ``--vchannels`` vchannels (one
pchannel topic each) on an embedded broker (Apache Kafka; ``--mq pulsar`` for Apache Pulsar,
``--mq tansu`` and ``--mq pulsar-lite`` for the side-by-sides):

1. backlog: ``--messages`` InsertRequests of 1,000 rows per vchannel are produced first;
2. reference: one plain Python process consumes, decodes and writes the same messages to
   parquet (no Spark);
3. cold run: a DataNode (Spark local[2], the shared pipeline) starts and runs until
   the backlog is committed: MB/s and rows/s end to end, peak RSS ("1x backlog").

For the largest dim only (the one the targets name), then:

4. steady load: ``--steady-mb-s`` per vchannel for ``--steady-seconds`` on the running
   DataNode; latency from each insert's ``produce()`` to the Delta commit covering it;
5. restarts, once per ``--backlog-factors`` N: the DataNode is stopped, N x ``--messages``
   more messages are produced, and a new DataNode is started: time to catch up, of which
   Spark startup, and peak RSS ("Nx backlog"). Both default backlogs (3x, 10x) are above
   the cycle byte cap, so their peak RSS compares runs whose cycles are all full.

``--scale N,N,...`` then runs the scale benchmark too (``scale``: many vchannels through the
standalone runner) and prints its tables after these.

``--deletes`` then runs the delete benchmark too (``deletes``: a collection of 1,000,000 rows,
steady inserts with and without 1,000 deletes a second, delete -> visible to DuckDB, on a broker
of its own) and prints its table last; ``--deletes-only`` runs only that one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field

from deltanode.mq.broker import Broker
from deltanode.mq.pulsar import RECEIVER_QUEUE as PULSAR_QUEUE

from . import latency as lat
from . import reference, scale, structured_streaming
from .datanode_run import DataNode
from .procs import WindowStats, window
from .pulsar_lite import RECEIVER_QUEUE as PULSAR_LITE_QUEUE
from .report import machine_info, mb, mib, rate, secs, short_channel, table, verdict
from .tasks import busy_while_full, running, task_spans
from .workload import ROWS_PER_MESSAGE, BenchCollection, make_collection

SLOTS = 2   # Spark local[2]: the machine's 2 cores

BROKERS = {"kafka": "Apache Kafka 3.9 (embedded, KRaft, file storage)", "tansu": "Tansu (memory storage)",
           "pulsar": "Apache Pulsar 4.0 (embedded standalone, one bookie)",
           "pulsar-lite": "pulsar-lite (file storage, receiver queue 1)"}

QUICK = {"messages": 6, "dims": "768", "backlog_factors": "3", "steady_seconds": 6.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="build/bench.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=30,
                   help="InsertRequests (1,000 rows each) per vchannel in the 1x backlog (default 30)")
    p.add_argument("--dims", default="128,768",
                   help="comma-separated FloatVector dims, one collection each (default 128,768); steady "
                        "load, restart and 10x backlog run on the largest")
    p.add_argument("--mq", choices=sorted(BROKERS), default="kafka",
                   help="the broker to run on: kafka (Apache Kafka), pulsar (Apache Pulsar), tansu or pulsar-lite "
                        "(for side-by-sides) (default kafka); "
                        "the reference consumes from the same broker")
    p.add_argument("--vchannels", type=int, default=1, help="vchannels (shards) per collection (default 1)")
    p.add_argument("--steady-mb-s", type=float, default=10.0,
                   help="steady load, wire MB/s per vchannel (default 10)")
    p.add_argument("--steady-seconds", type=float, default=20.0, help="steady load duration (default 20)")
    p.add_argument("--backlog-factors", default="3,10",
                   help="one restart per factor, its backlog that many times --messages (default 3,10); "
                        "0 skips the restarts")
    p.add_argument("--max-messages-per-batch", type=int, default=1000,
                   help="cycle cap in records of a pchannel (inserts and ticks) (default 1000, "
                        "datanode.batch.max.messages)")
    p.add_argument("--max-bytes-per-batch", default="256m",
                   help="cycle cap in wire bytes (default 256m, datanode.batch.max.bytes)")
    p.add_argument("--splits", type=int, default=2, help="Spark tasks per cycle (default 2, datanode.read.splits)")
    p.add_argument("--trigger-ms", type=int, default=1000,
                   help="pipeline cycle interval (default 1000, datanode.trigger.interval)")
    p.add_argument("--no-warmup", action="store_true",
                   help="start the pipeline on a cold Spark session (datanode.warmup = false)")
    p.add_argument("--no-reference", action="store_true", help="skip the plain-Python reference")
    p.add_argument("--peers", action="store_true",
                   help="also run the Spark Structured Streaming reference (build/deltanode_bench/"
                        "structured_streaming.py) on the same backlogs and a steady load, and beside each scale "
                        "point (Apache Kafka only); the real-Milvus side by side is `python -m "
                        "deltanode_bench.milvus_peer` (docs/benchmarks.md, \"Peers\")")
    p.add_argument("--scale", help="then run the scale benchmark too: comma-separated numbers of vchannels, e.g. "
                                   "1,16,64,256,1000 (each a fresh standalone; see deltanode_bench.scale)")
    p.add_argument("--scale-mq", help="scale: comma-separated brokers each point runs on in turn, e.g. kafka,tansu "
                                      "for a side-by-side (default: --mq)")
    p.add_argument("--scale-seconds", type=float, default=60.0, help="scale: load duration per point (default 60)")
    p.add_argument("--scale-inserts", type=float, default=1000.0,
                   help="scale: inserts a second in all: one a second per vchannel, up to this many (default 1000: "
                        "at 10,000 vchannels each gets one every 10 s; the embedded broker and the load generator "
                        "share the machine's 2 cores)")
    p.add_argument("--burn", type=float, default=0.0,
                   help="scale: a neighbour process taking this share of one core beside the node during each "
                        "point's load, e.g. 0.6 (default: none)")
    p.add_argument("--scale-burst", metavar="FACTOR:SECONDS",
                   help="scale: the load's first SECONDS at FACTOR times its rate, then at its rate (a node past "
                        "its capacity for a while, then under it), e.g. 3:15; prints latency by 5-s window")
    p.add_argument("--scale-repeat", type=int, default=1,
                   help="scale: run each point this many times in a row (default 1)")
    p.add_argument("--scale-conf", action="append", metavar="KEY=VALUE[;KEY=VALUE...]",
                   help="scale: conf lines for the point's standalone; given several times, each point runs once "
                        "per --scale-conf in turn (side by side), e.g. --scale-conf '' --scale-conf "
                        "'datanode.warmup=false'")
    p.add_argument("--scale-drain", type=float, default=120.0,
                   help="scale: longest wait for the last commits after the load (default 120)")
    p.add_argument("--deletes", action="store_true", help="then run the delete benchmark too (see above)")
    p.add_argument("--deletes-only", action="store_true", help="run only the delete benchmark")
    p.add_argument("--deletes-rows", type=int, default=1_000_000,
                   help="deletes: rows loaded and compacted before the phases (default 1000000)")
    p.add_argument("--deletes-seconds", type=float, default=60.0,
                   help="deletes: duration of each phase, with and without deletes (default 60)")
    p.add_argument("--deletes-insert-mb-s", type=float, default=1.0,
                   help="deletes: inserts in wire MB/s, the collection's (default 1)")
    p.add_argument("--delete-rate", type=float, default=1000.0,
                   help="deletes: keys deleted per second in the phase with deletes (default 1000)")
    p.add_argument("--delete-batch", type=int, default=200,
                   help="deletes: keys per delete call, split into one DeleteRequest per shard (default 200)")
    p.add_argument("--work-dir", help="keep broker logs, Delta tables and Spark logs here (default: a "
                                      "temporary directory, removed at the end)")
    p.add_argument("--quick", action="store_true",
                   help="a short run for development: " + ", ".join(f"--{k.replace('_', '-')} {v}"
                                                                     for k, v in QUICK.items()))
    args = p.parse_args(argv)
    if args.quick:
        given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        for k, v in QUICK.items():
            if f"--{k.replace('_', '-')}" not in given:
                setattr(args, k, v)
    try:
        args.scale_points = [int(x) for x in str(args.scale).split(",") if x.strip()] if args.scale else []
    except ValueError:
        p.error(f"--scale: expected comma-separated integers, got {args.scale!r}")
    args.scale_mqs = [x.strip() for x in (args.scale_mq or args.mq).split(",") if x.strip()]
    if not args.scale_mqs or set(args.scale_mqs) - set(BROKERS):
        p.error(f"--scale-mq: comma-separated brokers among {', '.join(sorted(BROKERS))}, got {args.scale_mq!r}")
    if args.scale is not None and (not args.scale_points or min(args.scale_points) < 1):
        p.error("--scale: at least one number of vchannels, each >= 1")
    try:
        args.burst = scale.Burst.parse(args.scale_burst) if args.scale_burst else None
    except ValueError as e:
        p.error(str(e))
    if args.peers and (args.mq != "kafka" or set(args.scale_mqs) - {"kafka"}):
        p.error("--peers: the Structured Streaming reference reads Apache Kafka (Spark's Kafka source): --mq kafka")
    if not 0.0 <= args.burn <= 1.0:
        p.error(f"--burn takes a share of one core in [0, 1], not {args.burn}")
    if args.scale_repeat < 1:
        p.error(f"--scale-repeat: at least 1, not {args.scale_repeat}")
    confs = []
    for conf in args.scale_conf or [""]:
        items = [item.partition("=") for item in conf.split(";") if item.strip()]
        for key, _, value in items:
            if not key.strip() or not value.strip():
                p.error(f"--scale-conf: expected KEY=VALUE items separated by ';', got {conf!r}")
        confs.append(tuple(f"{key.strip()} = {value.strip()}" for key, _, value in items))
    args.scale_confs = tuple(confs)
    try:
        args.dim_list = [int(d) for d in str(args.dims).split(",") if d.strip()]
    except ValueError:
        p.error(f"--dims: expected comma-separated integers, got {args.dims!r}")
    if not args.dim_list or min(args.dim_list) <= 0:
        p.error("--dims: at least one positive dim")
    try:
        from deltanode.config import parse_size
        args.max_bytes = parse_size(str(args.max_bytes_per_batch))
    except (ImportError, ValueError) as e:
        p.error(f"--max-bytes-per-batch: {e}")
    for name in ("messages", "vchannels", "max_messages_per_batch", "splits", "trigger_ms"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    try:
        args.factors = [f for f in (int(x) for x in str(args.backlog_factors).split(",") if x.strip()) if f]
    except ValueError:
        p.error(f"--backlog-factors: expected comma-separated integers, got {args.backlog_factors!r}")
    if any(f < 0 for f in args.factors) or args.steady_seconds < 0 or args.steady_mb_s <= 0:
        p.error("--backlog-factors and --steady-seconds must be >= 0, --steady-mb-s > 0")
    args.deletes = args.deletes or args.deletes_only
    if min(args.deletes_rows, args.delete_batch) < 1 or min(args.deletes_seconds, args.deletes_insert_mb_s,
                                                             args.delete_rate) <= 0:
        p.error("--deletes-rows, --deletes-seconds, --deletes-insert-mb-s, --delete-rate and --delete-batch "
                "must be > 0")
    return args


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
@dataclass
class ChannelRun:
    vchannel: str
    messages: int
    rows: int
    bytes: int
    start: int
    target: int
    t_query: float = 0.0
    t_commit: float = 0.0
    commits: list = field(default_factory=list)
    warm: float | None = None
    largest_batch: int = 0

    @property
    def seconds(self) -> float:
        return self.t_commit - self.t_query


@dataclass
class NodeRun:
    label: str
    dim: int
    t_start: float
    spark_context: float             # SparkContext up
    spark_ready: float | None        # its warm-up done (datanode.warmup, in the background; None: not before the stop)
    channels: list[ChannelRun]
    stats: WindowStats | None        # whole run (memory)
    busy: WindowStats | None         # from queries started to last commit (cores)
    warm: WindowStats | None = None  # from the first commit to the last (cores once warm)
    event_log: str = ""              # Spark's event log directory of the run (task concurrency)
    samples: list = field(default_factory=list)
    t_started: float = 0.0           # the flowgraphs' queries started
    t_warm: float | None = None      # the first commit (of the vchannel committing it last)

    @property
    def t_done(self) -> float:
        return max(c.t_commit for c in self.channels)

    @property
    def t_query(self) -> float:
        return min(c.t_query for c in self.channels)

    @functools.cached_property
    def spans(self) -> list[tuple[float, float]]:
        """(launch, finish) of the run's Spark tasks; read once, after the run (the log is flushed)."""
        return task_spans(self.event_log) if self.event_log else []

    def task_use(self, t0: float | None) -> TaskUse | None:
        """Task concurrency from ``t0`` to the last commit."""
        if t0 is None or not self.spans:
            return None
        t1 = self.t_done + 0.25
        by_count = running(self.spans, t0, t1)
        return TaskUse(sum(v for k, v in by_count.items() if k >= SLOTS) / (t1 - t0), by_count.get(1, 0.0) / (t1 - t0),
                       busy_while_full(self.spans, self.samples, t0, t1, SLOTS))


@dataclass
class TaskUse:
    full_share: float                 # of the window, with every task slot taken
    one_share: float                  # with one task running
    busy_while_full: float | None     # machine's busy cores during full_share


@dataclass
class SteadyRun:
    dim: int
    target_mb_s: float
    seconds: float
    inserts: int
    bytes: int
    lat: list[float]
    missing: int
    commits: int
    largest_batch: int
    stats: WindowStats | None


class Bench:
    def __init__(self, args: argparse.Namespace, work: str, broker: Broker, broker_pid: int | None = None) -> None:
        self.args, self.work, self.broker, self.broker_pid = args, work, broker, broker_pid
        self.storage_root = os.path.join(work, "delta")
        self._ids = iter(range(int(time.time()) % 100000 * 10, 10 ** 9))
        self.runs: list[NodeRun] = []
        self.refs: dict[tuple[int, str], dict] = {}  # (dim, backlog label) -> reference result
        # --peers: the Structured Streaming reference, (dim, backlog label or "steady") -> its result
        self.peers: dict[tuple[int, str], structured_streaming.ReferenceResult] = {}
        self.steady: SteadyRun | None = None
        self.msg_bytes: dict[int, int] = {}
        self._nodes = 0
        self.nodes: list[tuple[int, str, DataNode]] = []

    # -- helpers ---------------------------------------------------------------------
    def sizes(self, coll: BenchCollection, pchannel: str) -> list[tuple[int, int]]:
        """(offset, size) of the delivered records (those still in flight are past any target)."""
        sent = [s for s in coll.producer.sent if s.topic == pchannel]
        bad = [s for s in sent if s.error]
        if bad:
            raise RuntimeError(f"{len(bad)} records on {pchannel} failed: {bad[0].error}")
        return [(s.offset, s.size) for s in sent if s.offset >= 0]

    def inserts(self, coll: BenchCollection, pchannel: str, start: int, end: int) -> list:
        return [s for s in coll.producer.sent if s.topic == pchannel and s.rows and start <= s.offset < end]

    def node(self, coll: BenchCollection, **extra) -> DataNode:
        """A DataNode for ``coll`` (not started); ``extra``: more of its spec (``datanode_run``)."""
        self._nodes += 1
        n = self._nodes
        a = self.args
        spec = {"mq": self.broker.kind, "address": self.broker.address, "client": list(self.broker.client),
                "storage_root": self.storage_root,
                "status_file": "",
                "collections": [{"collection_id": coll.collection_id, "vchannels": coll.vchannels,
                                 "schema_b64": coll.schema_b64}],
                "trigger_s": a.trigger_ms / 1000, "max_messages": a.max_messages_per_batch,
                "max_bytes": a.max_bytes, "splits": a.splits, "master": f"local[{SLOTS}]",
                "warmup": not a.no_warmup, "broker_pid": self.broker_pid}
        spec["status_file"] = os.path.join(self.work, f"node{n}.status")
        spec["event_log"] = os.path.join(self.work, f"node{n}-events")
        os.makedirs(spec["event_log"])
        spec["spark_conf"] = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": spec["event_log"],
                              "spark.eventLog.compress": "false"}
        spec.update(extra)
        return DataNode(spec, spec["status_file"], os.path.join(self.work, f"node{n}.log"))

    def commits(self, coll: BenchCollection) -> dict[str, list[lat.Commit]]:
        return lat.commits_from_log(os.path.join(self.storage_root, "insert_log", str(coll.collection_id)))

    def catch_up(self, label: str, coll: BenchCollection, starts: dict[str, int],
                 targets: dict[str, int]) -> tuple[DataNode, NodeRun]:
        """Start a DataNode and wait until it committed ``targets``; the caller stops the node."""
        total = sum(lat.wire_bytes(self.sizes(coll, p), starts[v], targets[v])
                    for p, v in zip(coll.pchannels, coll.vchannels))
        node = self.node(coll).start()
        try:
            node.wait_ready()
            node.wait_committed(targets, timeout=120 + total / 1e6)
        except BaseException:
            node.stop(timeout=30)
            raise
        return node, self._node_run(label, coll, node, starts, targets)

    def _node_run(self, label: str, coll: BenchCollection, node: DataNode, starts: dict[str, int],
                  targets: dict[str, int]) -> NodeRun:
        by_vchannel = self.commits(coll)
        chans = []
        for p, v in zip(coll.pchannels, coll.vchannels):
            commits = [c for c in by_vchannel.get(v, []) if c.end > starts[v]]
            commits = lat.upto(commits, targets[v])
            sizes = self.sizes(coll, p)
            ins = self.inserts(coll, p, starts[v], targets[v])
            ch = ChannelRun(v, len(ins), sum(s.rows for s in ins), lat.wire_bytes(sizes, starts[v], targets[v]),
                            starts[v], targets[v], node.first("flowgraph_start", vchannel=v)["t"], commits[-1].t,
                            commits, lat.warm_rate(commits, sizes), lat.largest_batch(commits, sizes, starts[v]))
            chans.append(ch)
        ready = node.first("spark_ready")   # none when the node stopped before its warm-up ended
        run = NodeRun(label, coll.dim, node.t_start, node.first("spark_context")["t"], ready["t"] if ready else None,
                      chans, None, None, event_log=node.args["event_log"], samples=node.sampler.samples)
        run.stats = window(node.sampler.samples, node.t_start, run.t_done + 0.25)
        run.t_started = node.first("flowgraphs_started")["t"]
        run.busy = window(node.sampler.samples, run.t_started, run.t_done + 0.25)
        firsts = [c.commits[0].t for c in chans if len(c.commits) >= 2]
        if len(firsts) == len(chans):
            run.t_warm = max(firsts)
            run.warm = window(node.sampler.samples, run.t_warm, run.t_done + 0.25)
        return run

    # -- phases ----------------------------------------------------------------------
    def run_dim(self, dim: int, full: bool) -> None:
        a = self.args
        coll = make_collection(self.broker, next(self._ids), dim, a.vchannels)
        try:
            say(f"dim {dim}: producing {a.messages} messages x {a.vchannels} vchannel(s)")
            coll.produce_backlog(a.messages)
            targets = coll.settled_targets()
            starts = {v: 0 for v in coll.vchannels}
            self.msg_bytes[dim] = max(s.size for s in coll.producer.sent if s.rows)
            if not a.no_reference:
                self.refs[(dim, "1x")] = self.reference(coll, starts, targets, "1x")
            if a.peers:
                self.peers[(dim, "1x")] = self.structured_streaming(coll, starts, targets, "1x")
            say(f"dim {dim}: DataNode cold start on the backlog")
            node, run = self.catch_up("1x", coll, starts, targets)
            self.runs.append(run)
            self.nodes.append((dim, "1x" + (" + steady" if full and a.steady_seconds > 0 else ""), node))
            try:
                if full and a.steady_seconds > 0:
                    self.steady = self.steady_load(coll, node, targets)
            finally:
                node.stop()
            for i, factor in enumerate(a.factors if full else []):
                starts = {v: self.committed_end(coll, v) for v in coll.vchannels}
                n = a.messages * factor
                say(f"dim {dim}: DataNode stopped; producing {n} messages x {a.vchannels} vchannel(s), restarting")
                coll.produce_backlog(n)
                targets = coll.settled_targets()
                node, run = self.catch_up(f"{factor}x", coll, starts, targets)
                node.stop()
                if i == len(a.factors) - 1 and not a.no_reference:
                    self.refs[(dim, run.label)] = self.reference(coll, starts, targets, run.label)
                if i == len(a.factors) - 1 and a.peers:
                    self.peers[(dim, run.label)] = self.structured_streaming(coll, starts, targets, run.label)
                self.runs.append(run)
                self.nodes.append((dim, f"{factor}x restart", node))
            if full and a.peers and a.steady_seconds > 0:
                # Last: its load lands on the pchannels after every backlog the DataNode read.
                say(f"dim {dim}: Structured Streaming reference at a steady {a.steady_mb_s} MB/s")
                self.peers[(dim, "steady")] = structured_streaming.run_steady(
                    self.broker.address, coll, os.path.join(self.work, f"sss-{dim}-steady"), mb_s=a.steady_mb_s,
                    seconds=a.steady_seconds, message_bytes=self.msg_bytes[dim], broker_pid=self.broker_pid)
        finally:
            coll.close()

    def reference(self, coll: BenchCollection, starts: dict[str, int], targets: dict[str, int], label: str) -> dict:
        """The plain-process reference over the same offsets; adds ``mb_s`` (its slowest vchannel)."""
        say(f"dim {coll.dim}: reference (plain Python) on the {label} backlog")
        chans = [{"topic": p, "vchannel": v, "start": starts[v], "end": targets[v], "schema_b64": coll.schema_b64}
                 for p, v in zip(coll.pchannels, coll.vchannels)]
        out_dir = os.path.join(self.work, f"reference-{coll.dim}-{label}")
        ref = reference.run(self.broker.kind, self.broker.address, chans, out_dir,
                            queue=int(self.broker.settings.get("receiver.queue.size", PULSAR_QUEUE)))
        shutil.rmtree(out_dir, ignore_errors=True)
        ref["mb_s"] = min(c["bytes"] / c["seconds"] for c in ref["channels"]) / 1e6
        return ref

    def structured_streaming(self, coll: BenchCollection, starts: dict[str, int], targets: dict[str, int],
                             label: str) -> structured_streaming.ReferenceResult:
        """The Structured Streaming reference over the same offsets as the DataNode's run."""
        say(f"dim {coll.dim}: Structured Streaming reference on the {label} backlog")
        by_topic = {p: (starts[v], targets[v]) for p, v in zip(coll.pchannels, coll.vchannels)}
        starting = json.dumps({p: {"0": first} for p, (first, _) in by_topic.items()})
        return structured_streaming.run_backlog(
            self.broker.address, [coll], {p: end for p, (_, end) in by_topic.items()},
            os.path.join(self.work, f"sss-{coll.dim}-{label}"), label=label, message_bytes=self.msg_bytes[coll.dim],
            sent=[s for s in coll.producer.sent if s.rows and by_topic[s.topic][0] <= s.offset < by_topic[s.topic][1]],
            starting_offsets=starting, broker_pid=self.broker_pid,
            rows_produced=sum(s.rows for s in coll.producer.sent
                              if s.rows and by_topic[s.topic][0] <= s.offset < by_topic[s.topic][1]))

    def committed_end(self, coll: BenchCollection, vchannel: str) -> int:
        commits = self.commits(coll).get(vchannel, [])
        return commits[-1].end if commits else 0

    def steady_load(self, coll: BenchCollection, node: DataNode, after: dict[str, int]) -> SteadyRun:
        a = self.args
        size = self.msg_bytes[coll.dim]
        interval = size / (a.steady_mb_s * 1e6)
        say(f"dim {coll.dim}: steady load {a.steady_mb_s} MB/s per vchannel for {a.steady_seconds:.0f} s "
            f"(one {size / 1e6:.2f} MB message every {interval * 1000:.0f} ms per vchannel)")
        t0 = time.time()
        nxt = time.monotonic()
        end = nxt + a.steady_seconds
        while nxt < end:
            for p, v in zip(coll.pchannels, coll.vchannels):
                coll.producer.insert_message(p, v, coll.segments[v])
            nxt += interval
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        t1 = time.time()
        coll.producer.flush_producer()
        targets = coll.settled_targets()
        node.wait_committed(targets, timeout=120 + a.steady_seconds * 5)
        by_vchannel = self.commits(coll)
        lats, missing, nbytes, n, ncommits, largest = [], 0, 0, 0, 0, 0
        for p, v in zip(coll.pchannels, coll.vchannels):
            ins = [s for s in coll.producer.sent if s.topic == p and s.rows and s.t >= t0 and s.offset >= after[v]]
            commits = by_vchannel.get(v, [])
            during = [i for i, c in enumerate(commits) if c.t >= t0]
            ncommits += len(during)
            if during:
                first = during[0]
                start = commits[first - 1].end if first > 0 else 0
                largest = max(largest, lat.largest_batch(commits[first:], self.sizes(coll, p), start))
            ls, miss = lat.latencies([(s.offset, s.t) for s in ins], commits)
            lats += ls
            missing += miss
            n += len(ins)
            nbytes += sum(s.size for s in ins)
        return SteadyRun(coll.dim, a.steady_mb_s, t1 - t0, n, nbytes, lats, missing, ncommits, largest,
                         window(node.sampler.samples, t0, t1))

    # -- output ----------------------------------------------------------------------
    def render_peers(self) -> str:
        """DeltaNode, the Structured Streaming reference and the plain reference, side by side."""
        out = ["Peers (--peers): the same backlogs (flowgraph / query start -> last commit) and a steady load "
               "(insert -> durable); cores: busy cores of each one's process tree over that window, RSS at its "
               "peak; Structured Streaming: build/deltanode_bench/structured_streaming.py (its docstring says how "
               "it is built)"]

        def p50_p99(lats: list[float]) -> str:
            return f"{secs(lat.percentile(lats, 50))} / {secs(lat.percentile(lats, 99))}" if lats else "-"

        rows = []
        for (dim, label), ss in self.peers.items():
            if label == "steady":
                st = self.steady
                rows.append([dim, f"steady {self.args.steady_mb_s:g} MB/s", "-", "-", "-",
                             p50_p99(st.lat if st else []), p50_p99(ss.latencies),
                             secs(st.stats.cores if st and st.stats else None), secs(ss.cores), "-",
                             mib(ss.peak_rss) if ss.peak_rss else "-", f"{ss.rows_in_delta} of {ss.rows_produced}"])
                continue
            run = next((r for r in self.runs if r.dim == dim and r.label == label), None)
            ref = self.refs.get((dim, label))
            dn_mb_s = sum(c.bytes for c in run.channels) / (run.t_done - run.t_query) / 1e6 if run else None
            rows.append([dim, f"{label} backlog", rate(dn_mb_s), rate(ss.mb_per_s), rate(ref["mb_s"]) if ref else "-",
                         "-", "-", secs(run.busy.cores if run and run.busy else None), secs(ss.cores),
                         mib(run.stats.total_peak) if run and run.stats else "-",
                         mib(ss.peak_rss) if ss.peak_rss else "-", f"{ss.rows_in_delta} of {ss.rows_produced}"])
        out.append(table(["dim", "load", "DeltaNode MB/s", "Structured Streaming MB/s", "plain MB/s",
                          "DeltaNode p50 / p99 s", "Structured Streaming p50 / p99 s", "DeltaNode cores",
                          "Structured Streaming cores", "DeltaNode RSS MiB", "Structured Streaming RSS MiB",
                          "Structured Streaming rows in Delta"], rows))
        return "\n".join(out)

    def render(self, argv: list[str], wall: float) -> str:
        a = self.args
        m = machine_info()
        out = [
            "DeltaNode benchmark",
            f"command : build/bench.sh {shlex.join(argv)}".rstrip(),
            f"machine : nproc {m['nproc']}, {m['cpu']}, {m['memory']} RAM, load average at start {self.load0}",
            (f"software: python {m['python']}, pyspark {_version('pyspark')}, deltalake {_version('deltalake')}, "
             f"broker {BROKERS[a.mq]}"),
            (f"settings: Spark local[{SLOTS}], {a.vchannels} vchannel(s) per collection, {ROWS_PER_MESSAGE} rows per "
             f"message, cycle cap {a.max_messages_per_batch} records a pchannel and {a.max_bytes_per_batch} bytes, "
             f"{a.splits} tasks a cycle, trigger {a.trigger_ms} ms"),
            "",
        ]
        first = [r for r in self.runs if r.label == "1x"]
        rows = []
        for r in first:
            ref = self.refs.get((r.dim, r.label))
            ref_rate = {c["vchannel"]: c["bytes"] / c["seconds"] for c in ref["channels"]} if ref else {}
            for c in r.channels:
                mbs = c.bytes / c.seconds
                rr = ref_rate.get(c.vchannel)
                rows.append([r.dim, short_channel(c.vchannel), c.messages, mb(c.bytes), secs(c.seconds),
                             rate(mbs / 1e6), rate(c.rows / c.seconds, 0), rate(c.warm / 1e6 if c.warm else None),
                             len(c.commits), rate(rr / 1e6 if rr else None), f"{mbs / rr:.2f}" if rr else "-"])
            span = r.t_done - r.t_query   # the total row, also for one vchannel
            tot_b, tot_r = sum(c.bytes for c in r.channels), sum(c.rows for c in r.channels)
            rr = (sum(c["bytes"] for c in ref["channels"]) / sum(c["seconds"] for c in ref["channels"])
                  if ref else None)
            rows.append([r.dim, "total", sum(c.messages for c in r.channels), mb(tot_b), secs(span),
                         rate(tot_b / span / 1e6), rate(tot_r / span, 0), "-",
                         sum(len(c.commits) for c in r.channels), rate(rr / 1e6 if rr else None),
                         f"{tot_b / span / rr:.2f}" if rr else "-"])
        out.append("Backlog, first start: DataNode from flowgraph start (SparkContext up, its warm-up under way, see "
                   "Start-up) to the Delta commit of the last message; total = all vchannels from the first start "
                   "to the last commit")
        out.append(table(["dim", "vch", "msgs", "wire MB", "seconds", "MB/s", "rows/s", "MB/s after 1st commit",
                          "commits", "ref MB/s", "DataNode/ref"], rows))
        out += ["", "Start-up: DataNode process start -> SparkContext up -> first flowgraph started; warm-up = "
                    "the Python workers' (datanode.warmup, in the background as a DataNode runs it; '-': off, or not "
                    "done before the node stopped)"]
        out.append(table(["dim", "run", "context s", "warm-up s", "flowgraph start s"], [
            [r.dim, r.label, secs(r.spark_context - r.t_start),
             secs(r.spark_ready - r.spark_context) if r.spark_ready is not None else "-", secs(r.t_query - r.t_start)]
            for r in self.runs]))
        if self.refs:
            out += ["", "Reference: one plain Python process, consume -> decode -> parquet, same messages, no Spark"]
            rows = []
            for (dim, label), ref in self.refs.items():
                for c in ref["channels"]:
                    rows.append([dim, label, short_channel(c["vchannel"]), mb(c["bytes"]), secs(c["seconds"]),
                                 rate(c["bytes"] / c["seconds"] / 1e6), rate(c["rows"] / c["seconds"], 0),
                                 secs(c["consume"]), secs(c["decode"]), secs(c["write"]), mib(ref["peak_rss"])])
            out.append(table(["dim", "backlog", "vch", "wire MB", "seconds", "MB/s", "rows/s", "consume s",
                              "decode s", "parquet s", "peak RSS MiB"], rows))
        if self.peers:
            out += ["", self.render_peers()]
        out += ["", ("Memory: peak RSS of the DataNode process tree (sampled every 0.2 s from /proc, whole run; the "
                     "py workers sum counts pages shared by forked workers once per process)")]
        rows, cpu = [], []
        phases = [(r.dim, r.label, sum(c.messages for c in r.channels), sum(c.bytes for c in r.channels),
                   max(c.largest_batch for c in r.channels), r.stats) for r in self.runs]
        if self.steady:
            st = self.steady
            phases.append((st.dim, "steady", st.inserts, st.bytes, st.largest_batch, st.stats))
        for dim, label, msgs, nbytes, largest, s in phases:
            if s is None:
                continue
            rows.append([dim, label, msgs, mb(nbytes), mb(largest), mib(s.driver_peak), mib(s.jvm_peak),
                         mib(s.workers_peak), mib(s.worker_max_peak), s.workers_max_count, mib(s.total_peak)])
        out.append(table(["dim", "run", "msgs", "wire MB", "largest batch MB", "driver MiB", "JVM MiB",
                          "py workers MiB (sum)", "largest py worker MiB", "py procs", "sum MiB"], rows))
        for r in self.runs:
            for what, w, t0 in (("flowgraph start -> last commit", r.busy, r.t_started),
                                ("first commit -> last commit", r.warm, r.t_warm)):
                if w is not None:
                    cpu.append([r.dim, r.label, what, *_cpu_row(w), *_task_cols(r.task_use(t0))])
        if self.steady and self.steady.stats:
            cpu.append([self.steady.dim, "steady", "steady load", *_cpu_row(self.steady.stats), "-", "-", "-"])
        out += ["", (f"CPU: average busy cores (user+system, /proc) of the DataNode process tree, of the embedded "
                     f"broker, and of the whole machine ({os.cpu_count()} cores; the rest is the bench and the OS); "
                     f"share of the window with {SLOTS} and with 1 Spark task running (Spark's event log), and the "
                     f"machine's busy cores while {SLOTS} ran")]
        out.append(table(["dim", "run", "window", "seconds", "DataNode", "driver", "JVM", "py workers", "broker",
                          "machine", f"{SLOTS} tasks %", "1 task %", f"machine, {SLOTS} tasks"], cpu))
        if self.steady:
            st = self.steady
            out += ["", "Steady load on the running DataNode: produce() call to Delta commit timestamp, "
                        "per InsertRequest"]
            produced = rate(st.bytes / st.seconds / 1e6 / a.vchannels)
            stats = ([secs(lat.percentile(st.lat, 50)), secs(lat.percentile(st.lat, 99)), secs(max(st.lat))]
                     if st.lat else ["-", "-", "-"])
            row = [st.dim, a.vchannels, rate(st.target_mb_s), produced, secs(st.seconds, 1), st.inserts, st.commits,
                   *stats, st.missing]
            out.append(table(["dim", "vchannels", "target MB/s per vch", "produced MB/s per vch", "seconds",
                              "inserts", "commits", "p50 s", "p99 s", "max s", "uncommitted"], [row]))
        restarts = [r for r in self.runs if r.label != "1x"]
        if restarts:
            out += ["", "Restart: DataNode stopped, backlog produced, DataNode started (times from the start command)"]
            rows = []
            for r in restarts:
                nbytes = sum(c.bytes for c in r.channels)
                span = r.t_done - r.t_start
                warm = [c.warm for c in r.channels]
                flow = nbytes / (r.t_done - r.t_query) / 1e6
                ref_mb_s = self.refs[(r.dim, r.label)]["mb_s"] if (r.dim, r.label) in self.refs else None
                rows.append([r.dim, r.label, sum(c.messages for c in r.channels), mb(nbytes),
                             secs(r.spark_context - r.t_start), secs(span), secs(r.t_done - r.t_query),
                             rate(flow), rate(nbytes / span / 1e6),
                             rate(min(warm) / 1e6) if all(warm) else "-", sum(len(c.commits) for c in r.channels),
                             rate(ref_mb_s) if ref_mb_s else "-",
                             f"{flow / ref_mb_s:.2f}" if ref_mb_s else "-"])
            out.append(table(["dim", "backlog", "msgs", "wire MB", "Spark up s", "all committed s",
                              "of which flowgraphs s", "MB/s flowgraphs", "MB/s incl. startup",
                              "MB/s after 1st commit", "commits", "ref MB/s", "flowgraphs/ref"], rows))
        rows = []
        for dim, label, node in self.nodes:
            cycles = [e for e in node.events if e["ev"] == "cycle" and e["tasks"]]
            if not cycles:
                continue
            first, rest = cycles[0], cycles[1:]
            rows.append([dim, label, len(cycles), _ms(first["seconds"]), _ms(first["job_s"]),
                         *(_median_ms(rest, k) for k in ("seconds", "plan_s", "job_s", "sync_s"))])
        if rows:
            out += ["", ("Cycles that read data: pipeline phase durations in ms (per DataNode process, up to its "
                         "last 100 cycles)")]
            out.append(table(["dim", "process", "cycles", "1st cycle total", "1st job", "median total",
                              "median plan", "median job", "median commits"], rows))
        out += ["", "Targets (issues 3 and 8, one busy vchannel)"] + self.targets()
        out += ["", f"bench wall time {wall:.0f} s"]
        return "\n".join(out)


    def targets(self) -> list[str]:
        lines = []
        big = max(self.args.dim_list)
        r = next((r for r in self.runs if r.label == "1x" and r.dim == big), None)
        restarts = [x for x in self.runs if x.dim == big and x.label != "1x"]
        for x in ([r] if r is not None else []) + restarts[-1:]:
            worst = min(c.bytes / c.seconds for c in x.channels) / 1e6
            mbytes = sum(c.bytes for c in x.channels) / 1e6
            lines.append(f"  >= 40 MB/s per vchannel end to end, dim {big}, {x.label} backlog ({mbytes:.0f} MB, "
                         f"flowgraph start -> last commit): slowest vchannel {worst:.1f} MB/s"
                         f" -> {verdict(worst >= 40 if big == 768 else None)}")
        for x in restarts[-1:]:
            # On the same messages and on the same filesystem: the reference runs right after the
            # DataNode, beside its tables. Writes cost more CPU the more recently written data the
            # filesystem holds on this machine (``python -m deltanode_bench.disk_probe``), so the
            # reference on a near-empty work dir (1x) is no yardstick for a 930 MB run beside 1.5 GB.
            ref = self.refs.get((big, x.label))
            if ref is None:
                continue
            ratio = min(c.bytes / c.seconds for c in x.channels) / 1e6 / ref["mb_s"]
            lines.append(f"  >= 1.0 of the plain-process reference, dim {big}, {x.label} backlog (flowgraph start -> "
                         f"last commit) over the reference on the same messages ({ref['mb_s']:.1f} MB/s): "
                         f"{ratio:.2f} -> {verdict(ratio >= 1.0)}")
        largest = (restarts[-1:] or [r])[0] if r is not None else None
        w = largest and (largest.warm or largest.busy)
        use = largest.task_use(largest.t_warm if w is largest.warm else largest.t_started) if w is not None else None
        if use is not None:
            # Measured on the machine, not the DataNode's tree: the broker serving its fetches
            # runs on the same cores. Between the batches' task phases lie the micro-batch
            # boundaries (planning, the Delta commit, the tail of a batch whose tasks end apart).
            cores = os.cpu_count() or 1
            what = "first commit -> last commit" if w is largest.warm else "flowgraph start -> last commit"
            busy = use.busy_while_full
            met = (use.full_share > 0.5 and busy is not None and busy >= 0.9 * cores) if len(r.channels) == 1 else None
            lines.append(f"  both cores used for one vchannel, dim {big}, {largest.label} backlog ({what}): "
                         f"{SLOTS} tasks ran {use.full_share * 100:.0f}% of the time with the machine {secs(busy)} "
                         f"of {cores} cores busy meanwhile; {w.cores_machine:.2f} over the whole window (DataNode "
                         f"{w.cores:.2f}, broker {w.cores_broker:.2f}) -> {verdict(met)} (half the time, 90% busy)")
        # Backlogs above the byte cap (all batches full), smallest against largest.
        full = [x for x in self.runs if x.dim == big and x.stats and x.label != "1x"
                and sum(c.bytes for c in x.channels) > self.args.max_bytes * len(x.channels)]
        if len(full) >= 2:
            one, many = full[0].stats, full[-1].stats
            tot1, totn = one.total_peak, many.total_peak
            lines.append(f"  peak RSS does not grow with backlog (both above the {self.args.max_bytes_per_batch} "
                         f"batch cap): {full[0].label} {mib(tot1)} MiB, {full[-1].label} {mib(totn)} MiB "
                         f"(driver+JVM+workers) -> {verdict(totn <= tot1 * 1.10)} (10% tolerance)")
        else:
            lines.append("  peak RSS does not grow with backlog: needs two restart backlogs above the batch cap "
                         "(--backlog-factors) -> not measured")
        if self.steady and self.steady.lat:
            p99 = lat.percentile(self.steady.lat, 99)
            achieved = self.steady.bytes / self.steady.seconds / 1e6 / self.args.vchannels
            lines.append(f"  insert-to-commit p99 <= 1.2 s at 10 MB/s: p99 {p99:.2f} s at {achieved:.1f} MB/s per "
                         f"vchannel -> {verdict(p99 <= 1.2 if achieved >= 9.5 else None)}")
        return lines


def _task_cols(use: TaskUse | None) -> list[str]:
    if use is None:
        return ["-", "-", "-"]
    return [f"{use.full_share * 100:.0f}", f"{use.one_share * 100:.0f}", secs(use.busy_while_full)]


def _cpu_row(w: WindowStats) -> list[str]:
    return [secs(w.seconds, 1), secs(w.cores), secs(w.cores_driver), secs(w.cores_jvm), secs(w.cores_workers),
            secs(w.cores_broker), secs(w.cores_machine)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def _median_ms(cycles: list[dict], key: str) -> str:
    vals = [c[key] for c in cycles]
    return _ms(lat.percentile(vals, 50)) if vals else "-"


def _version(pkg: str) -> str:
    try:
        from importlib.metadata import version
        return version(pkg)
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def start_broker(args: argparse.Namespace, work: str, load0: str) -> tuple[object, Bench]:
    """An embedded broker (``--mq``) keeping its files under ``work``, and a ``Bench`` on it."""
    from deltanode.standalone.kafka_server import EmbeddedKafka
    from deltanode.standalone.pulsar_server import EmbeddedApachePulsar

    from .pulsar_lite import PulsarLite
    from .tansu import TansuBroker

    os.makedirs(work, exist_ok=True)
    service: EmbeddedApachePulsar | PulsarLite | EmbeddedKafka | TansuBroker
    if args.mq in ("pulsar", "pulsar-lite"):
        service = PulsarLite(os.path.join(work, "pulsar-lite")) if args.mq == "pulsar-lite" else \
            EmbeddedApachePulsar(os.path.join(work, "pulsar"))
        service.start()
        address = service.service_url
    else:
        service = TansuBroker(os.path.join(work, "tansu")) if args.mq == "tansu" else EmbeddedKafka(
            os.path.join(work, "kafka"))
        service.start()
        address = service.bootstrap_servers
    kind = "pulsar" if args.mq in ("pulsar", "pulsar-lite") else "kafka"
    client = (("receiver.queue.size", str(PULSAR_LITE_QUEUE)),) if args.mq == "pulsar-lite" else ()
    bench = Bench(args, work, Broker(kind, address, client=client), service.proc.pid if service.proc else None)
    bench.load0 = load0
    say(f"broker {address}, work dir {work}")
    return service, bench


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="deltanode-bench-")
    os.makedirs(work, exist_ok=True)
    services = []
    ok = False
    try:
        if not args.deletes_only:
            t0 = time.monotonic()
            broker, bench = start_broker(args, work, _load())
            services.append(broker)
            big = max(args.dim_list)
            for dim in args.dim_list:
                bench.run_dim(dim, full=dim == big)
            report = bench.render(argv, time.monotonic() - t0)  # reads the run's event logs in the work dir
            broker.stop()
            print(report, flush=True)
            if args.scale_points:
                t1 = time.monotonic()
                print("\n" + scale.main(args.scale_points, work, args.scale_seconds, args.scale_drain, argv,
                                        args.scale_mqs, args.scale_inserts, args.burn, args.scale_repeat,
                                        args.burst, args.peers, args.scale_confs)
                      + f"\n\nscale wall time {time.monotonic() - t1:.0f} s", flush=True)
        if args.deletes:
            from . import deletes  # DuckDB, only for this benchmark
            t1, load = time.monotonic(), _load()
            broker, bench = start_broker(args, os.path.join(work, "deletes"), load)
            services.append(broker)
            report = deletes.main(bench, argv, load)
            broker.stop()
            print(("" if args.deletes_only else "\n") + report
                  + f"\n\ndeletes wall time {time.monotonic() - t1:.0f} s", flush=True)
        ok = True
    finally:
        for broker in services:
            broker.stop()
        if ok and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
        elif not ok:
            say(f"failed; logs kept in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
