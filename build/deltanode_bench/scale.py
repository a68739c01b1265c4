"""The scale benchmark: ``build/bench.sh --scale 1,16,64,256,1000``.

For each N, a fresh ``./spark-submit.sh standalone`` (embedded etcd and broker, the channel
assigner, one DataNode on local Spark) serves N vchannels: N/2 collections of 2 shards over
the 16 default pchannels, created through the catalog as ``admin create-collection`` does.
A TimeTick runs every 200 ms on every pchannel from before the collections are created; once
every vchannel is watched, the load runs for ``--scale-seconds``: one InsertRequest of 50 rows
x 128-dim per vchannel per second (all through one proxy: one producer, one TSO). Then the
load stops, the DataNode gets up to ``--scale-drain`` seconds to commit the rest, and
standalone is stopped with SIGTERM.

Printed per N: the DataNode's busy cores and peak RSS during the load (its process tree: the
launcher, the driver, the JVM, the Python workers; the embedded etcd and broker are left out
and shown as "services"), insert -> durable latency (each insert's produce() call to the
timestamp of the first Delta commit whose txn covers its offset, from the Delta logs), Delta
commits per second during the load (every table's log), and rows produced against rows in
Delta (the add actions' record counts).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from deltanode.datacoord.catalog import CollectionRecord, NewCollection, create_collections
from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.standalone.services import free_port
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState
from deltanode.wire.names import pchannel_name
from deltanode.wire.schema import CollectionLayout, schema_from_json

from . import compaction, floor
from . import latency as lat
from .neighbour import Neighbour
from .procs import TreeSampler, window
from .pulsar_lite import RECEIVER_QUEUE as LITE_QUEUE
from .pulsar_lite import PulsarLite
from .report import mib, secs, table, verdict
from .tansu import TansuBroker
from .workload import BenchProducer, Sent, bench_schema

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PCHANNELS = 16
ROWS, DIM = 50, 128
# process names of the embedded services, left out of the DataNode's figures
SERVICES = ("etcd", "pulsar-lite")   # and the embedded Apache Kafka and Pulsar (procs.SERVICE_MAINS)
ENDS_S = 10.0
# vchannels -> insert -> durable p99 (s) the node must keep with a neighbour at 0.6 of a core
TARGET_P99 = {1000: 1.0, 10000: 2.0}   # seconds at each end of the load over which the services' CPU is shown as well


@dataclass
class ScaleResult:
    broker: str
    vchannels: int
    collections: int
    seconds: float
    inserts: int
    cores: float
    cores_split: tuple[float, float, float]   # driver, JVM, Python workers
    cores_services: float
    services_ends: tuple[float | None, float | None]   # services' cores in the load's first and last ENDS_S s
    cores_machine: float
    rss_peak: int
    latencies: list[float]
    uncommitted: int
    commits_per_s: float
    rows_produced: int
    rows_committed: int
    phases: PhaseFigures | None
    create_s: float
    watch_s: float
    file_create_ms: float
    neighbour_cores: float = 0.0   # what the neighbour (--burn) took during the load
    burst: Burst | None = None
    timeline: list[tuple[float, float]] = field(default_factory=list)   # (seconds into the load, latency)
    conf: str = ""   # the --scale-conf lines the point ran with, "; "-joined


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Standalone:
    """``./spark-submit.sh standalone`` on a generated conf, in a process group of its own."""

    def __init__(self, work: str, mq: str = "kafka", extra_conf: tuple[str, ...] = ()) -> None:
        """``extra_conf``: ``key = value`` lines appended to the generated conf (``--scale-conf``)."""
        self.work = work
        self.etcd = f"127.0.0.1:{free_port()}"
        # Tansu and pulsar-lite are no embedded brokers of standalone's: the benchmark runs them beside it.
        self.tansu = TansuBroker(os.path.join(work, "tansu")) if mq == "tansu" else None
        self.lite = PulsarLite(os.path.join(work, "pulsar-lite")) if mq == "pulsar-lite" else None
        if mq == "pulsar":
            self.broker = Broker("pulsar", f"pulsar://127.0.0.1:{free_port()}")
            broker_conf = f"mq.type = pulsar\nmq.pulsar.service.url = {self.broker.address}\n"
        elif self.lite is not None:
            self.broker = Broker("pulsar", self.lite.service_url, client=(("receiver.queue.size", str(LITE_QUEUE)),))
            broker_conf = (f"mq.type = pulsar\nmq.pulsar.service.url = {self.broker.address}\n"
                           f"mq.pulsar.receiver.queue.size = {LITE_QUEUE}\n")
        else:
            self.broker = Broker("kafka", self.tansu.bootstrap_servers if self.tansu else f"127.0.0.1:{free_port()}")
            broker_conf = f"mq.kafka.bootstrap.servers = {self.broker.address}\n"
        self.storage = os.path.join(work, "delta")
        self.conf = os.path.join(work, "standalone.conf")
        self.log = os.path.join(work, "standalone.log")
        with open(self.conf, "w") as f:
            f.write(f"embedded.etcd = true\nembedded.broker = {str(self.tansu is None and self.lite is None).lower()}\n"
                    f"embedded.data.dir = {work}/var\n"
                    f"etcd.endpoints = {self.etcd}\n{broker_conf}"
                    f"mq.pchannel.count = {PCHANNELS}\nstorage.root = {self.storage}\n"
                    f"standalone.progress.interval = 10s\nlog.level = INFO\nspark.master = local[2]\n"
                    # the load sends rootcoord's TimeTicks itself (its traffic, measured as such)
                    f"standalone.timetick.interval = 0\n"
                    f"spark.log.level = WARN\nspark.ui.enabled = false\n" + "".join(f"{line}\n" for line in extra_conf))
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> None:
        for beside in (self.tansu, self.lite):
            if beside is not None:
                beside.start()
        self.proc = subprocess.Popen([os.path.join(ROOT, "spark-submit.sh"), "standalone", "--conf", self.conf],
                                     cwd=ROOT, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while "standalone up" not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"standalone did not come up; see {self.log}:\n{self.text()[-3000:]}")
            time.sleep(0.5)

    def text(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # SIGTERM, not SIGINT: a bench started in the background (``&``) passes SIGINT on ignored,
            # and bash cannot trap a signal ignored at its start, so the launcher would never stop.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for beside in (self.tansu, self.lite):
            if beside is not None:
                beside.stop()

    @property
    def beside_pid(self) -> int | None:
        """The broker the benchmark runs beside standalone (Tansu, pulsar-lite), when there is one."""
        beside = self.tansu or self.lite
        return beside.proc.pid if beside is not None and beside.proc is not None else None


def _collections(n: int) -> list[int]:
    """Shards of each collection: pairs, and one single-shard collection when ``n`` is odd."""
    return [2] * (n // 2) + [1] * (n % 2)


def _watched(client: EtcdClient, vchannels: set[str]) -> int:
    prefix = keys.channel_watch_root("by-dev/meta")
    done = 0
    for key, value, _ in client.get_prefix(prefix):
        if key.rsplit("/", 1)[1] in vchannels and ChannelWatchInfo.FromString(value).state == \
                ChannelWatchState.WatchSuccess:
            done += 1
    return done


@dataclass(frozen=True, kw_only=True)
class Burst:
    """The load's first ``seconds`` at ``factor`` times its rate: a node past its capacity for a
    while, then back under it (``--scale-burst FACTOR:SECONDS``)."""

    factor: float
    seconds: float

    @classmethod
    def parse(cls, text: str) -> Burst:
        try:
            factor, seconds = (float(x) for x in text.split(":"))
        except ValueError:
            raise ValueError(f"--scale-burst takes FACTOR:SECONDS, e.g. 3:15, not {text!r}") from None
        if factor < 1 or seconds <= 0:
            raise ValueError(f"--scale-burst: a factor of at least 1 and a positive duration, not {text!r}")
        return cls(factor=factor, seconds=seconds)

    def due(self, elapsed: float, rate: float) -> int:
        """Inserts due ``elapsed`` seconds into the load."""
        fast = min(elapsed, self.seconds)
        return int(fast * rate * self.factor + max(0.0, elapsed - self.seconds) * rate)


NO_BURST = Burst(factor=1.0, seconds=1.0)


def _pace(producers: list[tuple[BenchProducer, CollectionRecord]], seconds: float, rate: float,
          burst: Burst = NO_BURST) -> None:
    """``rate`` inserts a second (``burst.factor`` times that for its first seconds), round robin
    over the vchannels, sent in 10 ms bursts (one wake-up per insert cost the load generator 0.2
    cores at 1,000 inserts/s, on the cores the DataNode runs on)."""
    slots = [(prod, rec, k) for prod, rec in producers for k in range(rec.shards)]
    start = time.monotonic()
    sent = 0
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= seconds:
            return
        due = burst.due(elapsed, rate) + 1
        while sent < due:
            prod, rec, k = slots[sent % len(slots)]
            prod.insert_message(rec.pchannels[k], rec.vchannels[k], rec.collection_id + 1 + k, rec.collection_id)
            sent += 1
        time.sleep(0.01)


def _delta_figures(storage: str, records: list[CollectionRecord], producers: dict[int, BenchProducer],
                   t0: float, t1: float, timeline: list[tuple[float, float]] | None = None
                   ) -> tuple[list[float], int, float, int]:
    """Latencies of the inserts produced in [t0, t1], how many are not committed, commits per second
    in [t0, t1] over every table, and the rows in the insert_log tables; ``timeline`` gets each
    committed insert's (produce time, latency)."""
    lats, missing, commits, rows = [], 0, 0, 0
    for rec in records:
        uri = os.path.join(storage, "insert_log", str(rec.collection_id))
        by_vchannel = lat.commits_from_log(uri) if os.path.isdir(uri) else {}
        sent: list[Sent] = [s for s in producers[rec.collection_id].sent if s.rows and t0 <= s.t <= t1]
        for p, v in zip(rec.pchannels, rec.vchannels):
            mine = [(s.offset, s.t) for s in sent if s.topic == p]
            ls, miss = lat.latencies(mine, by_vchannel.get(v, []))
            lats += ls
            missing += miss
            if timeline is not None:
                timeline += lat.timed_latencies(mine, by_vchannel.get(v, []))
        rows += _table_rows(uri)
    for kind in ("insert_log", "delta_log"):
        for name in os.listdir(os.path.join(storage, kind)) if os.path.isdir(os.path.join(storage, kind)) else []:
            commits += _commits_between(os.path.join(storage, kind, name), t0, t1)
    commits += _commits_between(os.path.join(storage, "quarantine"), t0, t1)
    return lats, missing, commits / (t1 - t0), rows


def _log_actions(uri: str):
    log_dir = os.path.join(uri, "_delta_log")
    for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
        if name.endswith(".json") and name[:20].isdigit():
            with open(os.path.join(log_dir, name)) as f:
                yield [json.loads(line) for line in f if line.strip()]


def _txn(uri: str, vchannel: str) -> int | None:
    """The vchannel's txn in the table: from its newest commit that carries one (newest first)."""
    log_dir = os.path.join(uri, "_delta_log")
    names = sorted((n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit()), reverse=True) \
        if os.path.isdir(log_dir) else []
    needle = json.dumps(vchannel)
    for name in names:
        with open(os.path.join(log_dir, name)) as f:
            for line in f:
                if '"txn"' in line and needle in line:
                    return int(json.loads(line)["txn"]["version"])
    return None


def _commits_between(uri: str, t0: float, t1: float) -> int:
    n = 0
    for actions in _log_actions(uri):
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
        if info is not None and t0 <= info["timestamp"] / 1000 <= t1:
            n += 1
    return n


def _table_rows(uri: str) -> int:
    """Rows of the files a table holds now (adds minus removes, from the stats in the log)."""
    files: dict[str, int] = {}
    for actions in _log_actions(uri):
        for a in actions:
            if "add" in a:
                files[a["add"]["path"]] = json.loads(a["add"]["stats"])["numRecords"]
            elif "remove" in a:
                files.pop(a["remove"]["path"], None)
    return sum(files.values())


_CYCLE = re.compile(r"deltanode\.pipeline\.cycle: cycle \d+: .*?(\d+) messages"
                    r".*?(\d+) commit\(s\) for (\d+) vchannel.*?; "
                    r"([0-9.]+) s \(plan ([0-9.]+), job ([0-9.]+), apply ([0-9.]+), commits ([0-9.]+); "
                    r"tasks ([0-9.]+) s, their CPU ([0-9.]+) s, broker wait ([0-9.]+) s\)")


@dataclass(frozen=True)
class PhaseFigures:
    """Where the cycles of the load went: the median of each phase over the cycles that committed
    something (the DataNode logs one line per such cycle), in seconds."""

    cycles: int
    cycle: float
    cycle_p90: float
    plan: float
    job: float
    apply: float
    sync: float
    tasks_wall: float     # the cycle's tasks, summed (2 run at once)
    tasks_cpu: float      # their Python workers' CPU, summed
    tasks_read: float     # their wait for the broker's messages, summed
    messages: float
    vchannels_committed: float
    task_ms_per_message: float   # the cycle's tasks over its messages (ms): what a run's cycles grow with
    cpu_ms_per_message: float    # their CPU over its messages (ms)
    # The load's first FIRST_CYCLES cycles that read messages: a worker's first pass over the load's
    # collections (decoding, layouts, file formats made once per worker) against the medians above.
    first_cycle: float = math.nan               # their mean cycle (s)
    first_cpu_ms_per_message: float = math.nan  # their tasks' CPU over their messages (ms)


FIRST_CYCLES = 3


def _phases(log_text: str, t0: float, t1: float) -> PhaseFigures | None:
    """The phase figures of the cycles logged in [t0, t1]."""
    rows = []
    for line in log_text.splitlines():
        found = _CYCLE.search(line)
        if found is None:
            continue
        try:
            t = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S"))
        except ValueError:
            continue
        if t0 <= t <= t1:
            rows.append([float(x) for x in found.groups()])
    if not rows:
        return None
    column = list(zip(*rows))
    med = [lat.percentile(list(c), 50) for c in column]
    per_message = [(1e3 * r[8] / r[0], 1e3 * r[9] / r[0]) for r in rows if r[0]]
    first = [r for r in rows if r[0]][:FIRST_CYCLES]
    return PhaseFigures(len(rows), med[3], lat.percentile(list(column[3]), 90), med[4], med[5], med[6], med[7],
                        med[8], med[9], med[10], med[0], med[2],
                        lat.percentile([t for t, _ in per_message], 50) if per_message else math.nan,
                        lat.percentile([c for _, c in per_message], 50) if per_message else math.nan,
                        first_cycle=sum(r[3] for r in first) / len(first) if first else math.nan,
                        first_cpu_ms_per_message=(1e3 * sum(r[9] for r in first) / sum(r[0] for r in first)
                                                  if first else math.nan))


def file_create_ms(work: str, files: int = 500) -> float:
    """CPU milliseconds to create and write one 30 KB file (a small binlog's size) under ``work``,
    over ``files`` of them in directories of their own, as a cycle's binlogs are. The files are
    kept: deleting them would make the next files dearer (docs/platform.md, ext4 without a journal
    here: it skips inodes freed in the last minutes, reading each one, when it allocates one). On
    this machine this went from 0.04 to 0.7 ms within minutes, following what the disk had just
    been through, so each point prints what it started with."""
    probe = os.path.join(work, "file-probe")
    data = os.urandom(30_000)
    started = time.process_time()
    for i in range(files):
        os.makedirs(os.path.join(probe, str(i)))
        with open(os.path.join(probe, str(i), "part-0.parquet"), "wb") as f:
            f.write(data)
    return (time.process_time() - started) * 1000 / files


def run_point(n: int, work: str, seconds: float, drain: float, mq: str = "kafka",
              rate_cap: float = 1000.0, burn: float = 0.0, burst: Burst | None = None,
              extra_conf: tuple[str, ...] = ()) -> ScaleResult:
    os.makedirs(work, exist_ok=True)
    probe_ms = file_create_ms(work)
    node = Standalone(work, mq, extra_conf)
    say(f"{n} vchannel(s): starting standalone")
    node.start()
    client = EtcdClient(node.etcd)
    stop = threading.Event()
    sampler = proxy = None
    neighbour = Neighbour(burn) if burn else None
    rate = min(float(n), rate_cap)
    try:
        schema_doc = bench_schema(DIM)
        del schema_doc["fields"][1]   # pk and the vector: the 50 x 128-dim inserts
        shards = _collections(n)
        # TimeTicks run from the start, as rootcoord's do: vchannels watched before the load
        # reach their first tick and catch up, as they would beside a real Milvus.
        proxy = Proxy(node.broker)
        pchannels = [pchannel_name("by-dev-rootcoord-dml", i) for i in range(PCHANNELS)]
        ticker(MilvusProducer(proxy, CollectionLayout(()), 0), pchannels, stop)
        say(f"{n} vchannel(s): creating {len(shards)} collection(s)")
        created = time.monotonic()
        records = create_collections(client, "by-dev/meta", node.broker,
                                     [NewCollection(name=f"scale{i}", schema=schema_from_json(schema_doc, f"scale{i}"),
                                                    shards=k) for i, k in enumerate(shards)],
                                     "by-dev-rootcoord-dml", PCHANNELS)
        create_s = time.monotonic() - created
        vchannels = {v for r in records for v in r.vchannels}
        deadline = time.monotonic() + 600
        while _watched(client, vchannels) < len(vchannels):
            if time.monotonic() > deadline or node.proc.poll() is not None:
                raise RuntimeError(f"only {_watched(client, vchannels)} of {n} vchannels watched; see {node.log}")
            time.sleep(1)
        watch_s = time.monotonic() - created - create_s
        say(f"{n} vchannel(s): created in {create_s:.1f} s, all watched {watch_s:.1f} s later")
        producers = {r.collection_id: BenchProducer(proxy, CollectionLayout.from_proto(
            schema_from_json(schema_doc, r.name)), r.collection_id, r.name, rows=ROWS) for r in records}
        sampler = TreeSampler(node.proc.pid, interval=0.5, exclude_comms=SERVICES,
                              broker_pid=node.beside_pid).start()
        say(f"{n} vchannel(s): {rate:.0f} inserts/s and {PCHANNELS * 5} ticks/s for {seconds:.0f} s"
            + (f", a neighbour taking {burn:.2f} of a core" if neighbour else ""))
        if neighbour is not None:
            neighbour.start()
        t0 = time.time()
        _pace([(producers[r.collection_id], r) for r in records], seconds, rate, burst or NO_BURST)
        t1 = time.time()
        proxy.sender.flush(60)
        say(f"{n} vchannel(s): load done; waiting up to {drain:.0f} s for the last commits")
        last = {(r.collection_id, v): max((s.offset for s in producers[r.collection_id].sent
                                           if s.rows and s.topic == p), default=-1)
                for r in records for p, v in zip(r.pchannels, r.vchannels)}
        last = {k: off for k, off in last.items() if off >= 0}
        deadline = time.monotonic() + drain
        while last and time.monotonic() < deadline:
            last = {(cid, v): off for (cid, v), off in last.items()
                    if (_txn(os.path.join(node.storage, "insert_log", str(cid)), v) or 0) <= off}
            time.sleep(2)
        if neighbour is not None:
            neighbour.stop()
        stats = window(sampler.samples, t0, t1)
        first, last = (window(sampler.samples, a, b) for a, b in ((t0, t0 + ENDS_S), (t1 - ENDS_S, t1)))
        ends = (first.cores_services if first else None, last.cores_services if last else None)
    finally:
        stop.set()
        if neighbour is not None:
            neighbour.stop()
        if sampler is not None:
            sampler.stop()
        if proxy is not None:
            proxy.close()
        client.close()
        node.stop()
    timeline: list[tuple[float, float]] = []
    lats, missing, commits_per_s, rows = _delta_figures(node.storage, records, producers, t0, t1, timeline)
    inserts = sum(1 for p in producers.values() for s in p.sent if s.rows)
    return ScaleResult(mq, n, len(records), t1 - t0, inserts, stats.cores,
                       (stats.cores_driver, stats.cores_jvm, stats.cores_workers), stats.cores_services,
                       ends, stats.cores_machine,
                       stats.total_rss_peak, lats, missing, commits_per_s, inserts * ROWS, rows,
                       _phases(node.text(), t0, t1), create_s, watch_s, probe_ms,
                       neighbour.cores if neighbour else 0.0, burst,
                       sorted((t - t0, latency) for t, latency in timeline) if burst else [], "; ".join(extra_conf))


WINDOW_S = 5.0


def timeline_rows(timeline: list[tuple[float, float]]) -> list[list]:
    """One row per ``WINDOW_S`` of produce time: its inserts and their latency percentiles."""
    windows: dict[int, list[float]] = {}
    for t, latency in timeline:
        windows.setdefault(int(t // WINDOW_S), []).append(latency)
    return [[f"{k * WINDOW_S:.0f}", len(ls), secs(lat.percentile(ls, 50)), secs(lat.percentile(ls, 99)), secs(max(ls))]
            for k, ls in sorted(windows.items())]


def _label(r: ScaleResult) -> str:
    """The broker a point ran on, with its ``--scale-conf`` lines when it had some."""
    return f"{r.broker} [{r.conf}]" if r.conf else r.broker


def render_floor(results: list[ScaleResult], floors: dict[int, float]) -> str:
    """Each point's DataNode CPU an insert beside the floor's for its shape (``floor``)."""
    rows = []
    for r in results:
        ours = r.cores * r.seconds * 1e3 / r.inserts if r.inserts else math.nan
        rows.append([r.vchannels, _label(r), f"{ours:.3f}", f"{floors[r.vchannels]:.3f}",
                     f"{ours / floors[r.vchannels]:.2f}"])
    return "\n".join([
        "The floor (deltanode_bench.floor): the least CPU an insert costs here, one task's cycle of the point's "
        "shape read from the wire, one Parquet file a vchannel, one commit a collection, fsynced, in the "
        "benchmark's process before the points; DataNode = its process tree's CPU during the load over the "
        "inserts produced (driver, JVM, Python workers; TimeTicks and idle vchannels included)",
        table(["vchannels", "broker", "DataNode CPU ms / insert", "floor ms / insert", "DataNode / floor"], rows)])


def render(results: list[ScaleResult], argv: list[str], rate_cap: float) -> str:
    out = ["DeltaNode scale benchmark", f"command : build/bench.sh {' '.join(argv)}",
           f"traffic : InsertRequests of {ROWS} rows x {DIM}-dim, one a second per vchannel up to {rate_cap:.0f} a "
           f"second in all (beyond that many vchannels, each gets one every N/{rate_cap:.0f} s); a TimeTick every "
           f"200 ms on each of {PCHANNELS} pchannels; collections of 2 shards; standalone with its defaults", "",
           "DataNode = its process tree (launcher, driver with the channel assigner, JVM, Python workers) without the "
           "embedded etcd and broker (services); cores averaged and RSS (summed over the tree) at its peak during the "
           "load; latency = insert produce() -> timestamp of the Delta commit covering it; create = the collections "
           "created in one catalog batch, watch = from then until every vchannel is watched by the DataNode; file ms = "
           "CPU to create a 30 KB file in a directory of its own just before the point (it varies with the disk's "
           f"recent writes and deletes); services cores in brackets: over the load's first and last {ENDS_S:.0f} s "
           "(Tansu's memory storage costs more the more it holds, docs/platform.md); broker: the one the point ran "
           "on (kafka, pulsar: the embedded Apache Kafka or Pulsar; tansu, pulsar-lite: beside standalone, its CPU "
           "among the services)"]
    rows = []
    for r in results:
        stats = ([secs(lat.percentile(r.latencies, 50)), secs(lat.percentile(r.latencies, 99)), secs(max(r.latencies))]
                 if r.latencies else ["-", "-", "-"])
        rows.append([r.vchannels, _label(r), r.collections, f"{r.inserts / r.seconds:.0f}", secs(r.cores),
                     " / ".join(secs(c) for c in r.cores_split),
                     f"{secs(r.cores_services)} ({secs(r.services_ends[0])} -> {secs(r.services_ends[1])})",
                     secs(r.cores_machine), mib(r.rss_peak), *stats, f"{r.commits_per_s:.1f}",
                     r.rows_produced, r.rows_committed, r.uncommitted, secs(r.create_s, 1), secs(r.watch_s, 1),
                     f"{r.file_create_ms:.3f}", secs(r.neighbour_cores) if r.neighbour_cores else "-"])
    out.append(table(["vchannels", "broker", "collections", "inserts/s", "DataNode cores", "driver / JVM / workers",
                      "services cores", "machine cores", "peak RSS MiB", "p50 s", "p99 s", "max s", "commits/s",
                      "rows produced", "rows in Delta", "inserts uncommitted", "create s", "watch s", "file ms",
                      "neighbour cores"], rows))
    out += ["", "Where the cycles went: medians over the cycles that committed during the load (s); tasks = the "
                "cycle's Spark tasks summed (two run at once), their CPU = their Python workers', broker wait = "
                "their wait for messages; per message = each cycle's over its messages (ms), the cost a run's "
                f"cycles grow with (docs/benchmarks.md); first {FIRST_CYCLES} = the load's first cycles that read "
                "messages, "
                "each worker's first pass over the load's collections (their mean cycle, their tasks' CPU over their "
                "messages)"]
    rows = []
    for r in results:
        f = r.phases
        rows.append([r.vchannels, _label(r)] + (["-"] * 17 if f is None else [
            f.cycles, secs(f.cycle), secs(f.cycle_p90), secs(f.plan), secs(f.job), secs(f.apply), secs(f.sync),
            secs(f.tasks_wall), secs(f.tasks_cpu), secs(f.tasks_read), f"{f.messages:.0f}",
            f"{f.vchannels_committed:.0f}", f"{(f.job - f.tasks_wall / 2) * 1000:.0f}",
            f"{f.task_ms_per_message:.2f}", f"{f.cpu_ms_per_message:.2f}", secs(f.first_cycle),
            f"{f.first_cpu_ms_per_message:.2f}"]))
    out.append(table(["vchannels", "broker", "cycles", "cycle", "cycle p90", "plan", "job", "apply", "sync (commits)",
                      "tasks", "tasks' CPU", "broker wait", "messages", "vchannels committed", "job - tasks/2 ms",
                      "tasks ms / message", "their CPU ms / message", f"first {FIRST_CYCLES}: cycle",
                      f"first {FIRST_CYCLES}: CPU ms / message"], rows))
    for r in results:
        if r.burst is not None:
            out += ["", f"{r.vchannels} vchannels on {r.broker}: the load's first {r.burst.seconds:.0f} s at "
                        f"{r.burst.factor:g}x its rate, then at its rate; insert -> durable by when the insert was "
                        f"produced ({WINDOW_S:.0f}-s windows)"]
            out.append(table(["from s", "inserts", "p50 s", "p99 s", "max s"], timeline_rows(r.timeline)))
    out += ["", "Targets: every row committed, and with a neighbour taking 0.6 of a core (--burn 0.6) beside the node"]
    for r in results:
        every = r.rows_committed == r.rows_produced and r.uncommitted == 0
        p99 = lat.percentile(r.latencies, 99) if r.latencies else math.inf
        beside = f", a neighbour at {r.neighbour_cores:.2f} core" if r.neighbour_cores else ", no neighbour"
        for n, bound in TARGET_P99.items():
            if r.vchannels == n:
                ok = p99 <= bound and every and r.neighbour_cores >= 0.55
                out.append(f"  {n:,} vchannels on {r.broker}{beside}: p99 {p99:.2f} s <= {bound:.0f}, every row "
                           f"committed ({r.rows_committed} of {r.rows_produced}) -> {verdict(ok)}")
    if not any(r.vchannels in TARGET_P99 for r in results):
        out.append("  (they name 1,000 and 10,000 vchannels: neither point ran)")
    return "\n".join(out)


def main(points: list[int], work: str, seconds: float, drain: float, argv: list[str], mqs: list[str],
         rate_cap: float = 1000.0, burn: float = 0.0, repeat: int = 1, burst: Burst | None = None,
         peers: bool = False, confs: tuple[tuple[str, ...], ...] = ((),)) -> str:
    """Each point on each broker of ``mqs`` in turn, ``repeat`` times in a row (side by side in one
    run: the machine's state drifts less between neighbours than between runs); with ``peers``, the
    Structured Streaming reference on the same load after each point."""
    from . import structured_streaming
    results = []
    references = []
    say("the floor of each point's shape (deltanode_bench.floor)")
    floors = {n: floor.ms_per_insert(n, rate_cap) for n in sorted(set(points))}
    for i, n in enumerate(points):
        for k in range(repeat):
            for mq in mqs:
                for c, conf in enumerate(confs):
                    run = (f"scale-{i}-{n}-{mq}" + (f"-{k + 1}" if repeat > 1 else "")
                           + (f"-conf{c + 1}" if len(confs) > 1 else ""))
                    results.append(run_point(n, os.path.join(work, run), seconds, drain, mq, rate_cap, burn, burst,
                                             conf))
                    say(f"{n} vchannel(s) on {_label(results[-1])}: p99 "
                        f"{lat.percentile(results[-1].latencies, 99) if results[-1].latencies else '-'}")
            if peers:
                references.append(structured_streaming.run_scale(
                    n, os.path.join(work, f"sss-scale-{i}-{n}" + (f"-{k + 1}" if repeat > 1 else "")),
                    seconds=seconds, drain=drain, rate_cap=rate_cap))
    largest = max(range(len(points)), key=lambda i: points[i])
    last = (f"scale-{largest}-{points[largest]}-{mqs[-1]}" + (f"-{repeat}" if repeat > 1 else "")
            + (f"-conf{len(confs)}" if len(confs) > 1 else ""))
    say(f"{points[largest]} vchannel(s): compacting the tables the load left")
    figures = compaction.measure(os.path.join(work, last, "delta"))
    peers_table = ("\n\n" + render_peers(results, references)) if references else ""
    return (render(results, argv, rate_cap) + "\n\n" + render_floor(results, floors) + peers_table
            + f"\n\nAfter the {points[largest]}-vchannel point on {mqs[-1]}. " + compaction.render(figures))


def render_peers(results: list[ScaleResult], references: list) -> str:
    """Each point's DataNode beside the Structured Streaming reference on the same load."""
    rows = []
    for r, ref in zip([r for r in results if r.broker == "kafka"], references):
        def stats(lats: list[float]) -> str:
            return " / ".join(secs(lat.percentile(lats, q)) for q in (50, 99)) if lats else "-"
        rows.append([r.vchannels, stats(r.latencies), stats(ref.latencies), secs(r.cores), secs(ref.cores),
                     mib(r.rss_peak), mib(ref.rss_peak), f"{r.rows_committed} of {r.rows_produced}",
                     f"{ref.rows_in_delta} of {ref.rows_produced}",
                     f"{lat.percentile(ref.latencies, 99) / lat.percentile(r.latencies, 99):.1f}"
                     if r.latencies and ref.latencies else "-"])
    return "\n".join(["Peers (--peers): the DataNode and the Spark Structured Streaming reference (one query whose "
                      "batches fan out to every collection's table; build/deltanode_bench/structured_streaming.py) "
                      "on the same load, one after the other; cores: busy cores of each one's process tree during "
                      "the load (the reference's broker apart)",
                      table(["vchannels", "DataNode p50 / p99 s", "reference p50 / p99 s", "DataNode cores",
                             "reference cores", "DataNode RSS MiB", "reference RSS MiB", "DataNode rows",
                             "reference rows", "reference p99 / DataNode p99"], rows)])
