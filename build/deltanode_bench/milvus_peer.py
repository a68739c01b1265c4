"""A real Milvus 2.3.5 beside DeltaNode's mirror: insert acknowledged -> durable on each side.

``python -m deltanode_bench.milvus_peer --help`` (or ``build/bench.sh --peers``, through ``run``):
starts an embedded etcd and Apache Kafka, the Milvus 2.3.5 the tests use (``build/milvus_env.sh``;
``dataNode.segment.syncPeriod`` at its default 600 s or at the seconds given) and DeltaNode's mirror
beside it (``./spark-submit.sh standalone --conf conf/milvus-mirror.conf``, DeltaNode's defaults),
makes a collection through pymilvus (Int64 key, a FloatVector of ``--dim``), inserts ``--rows`` rows
``--rate`` times a second for ``--seconds`` seconds and records when each insert was acknowledged
(wall clock, right after pymilvus's Insert returned) and its keys. For each insert it then gives:

- **DeltaNode, readable by DuckDB**: the end of the first DuckDB ``delta_scan`` of the collection's
  ``insert_log`` table (polled every ``--poll`` s, one DuckDB thread) that returned every key of
  the insert; late by up to one poll interval plus one query.
- **DeltaNode, Delta commit**: the exact moment behind it, the modification time of the
  ``_delta_log/N.json`` of the first commit adding a file that holds the insert's keys (every add
  of every commit is read after the run).
- **Milvus, binlog written**: the modification time of the first insert binlog of the primary-key
  field (``insert_log/{collection}/{partition}/{segment}/{field}/{logID}`` in Milvus's
  localStorage) holding every key of the insert, read as the files appear (every ``--poll-files`` s)
  with DeltaNode's Milvus binlog reader. Milvus writes a sync's binlogs of every field together,
  then its stats log, then saves the segment meta in etcd: this is when the first copy of the row
  outside the message queue exists.

An insert still missing on a side when the watch ends (``--grace`` s after the last insert) counts
with its wait so far as a lower bound: a percentile that such an insert could move is printed as
``>= x``. Files and bytes: every file seen under each side's storage over the run (the trees are
listed every ``--poll-files`` s; a file counted once at its largest size), DeltaNode's split into
data files and ``_delta_log`` entries, Milvus's into insert_log / stats_log / delta_log.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .latency import percentile
from .report import machine_info, mb, secs, table, verdict

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SYNC_PERIOD = 600.0          # Milvus 2.3.5 dataNode.segment.syncPeriod (s)
MINIMUM_SYNC_PERIOD = 1.0            # what "both" runs beside the default (see the report)
PK, VEC = "id", "vec"


# --- results --------------------------------------------------------------------------------
@dataclass
class Latencies:
    """One side's insert -> durable latencies (s); ``pending``: the lower bounds of those not seen."""
    what: str
    seen: list[float] = field(default_factory=list)
    pending: list[float] = field(default_factory=list)

    @property
    def inserts(self) -> int:
        return len(self.seen) + len(self.pending)

    def stat(self, q: float) -> tuple[float | None, bool]:
        """(value, exact) of the ``q``-th percentile over every insert; when inserts are pending and
        could move it, the value is a lower bound (exact False); None when nothing was seen."""
        if not self.seen and not self.pending:
            return None, True
        low = percentile(self.seen + self.pending, q)
        high = percentile(self.seen + [float("inf")] * len(self.pending), q)
        return low, low == high

    def cell(self, q: float) -> str:
        value, exact = self.stat(q)
        if value is None:
            return "-"
        return secs(value) if exact else f">= {secs(value)}"


@dataclass
class Written:
    """Files and bytes one side wrote over the run, by kind."""
    files: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    files_at_end: int = 0
    bytes_at_end: int = 0

    @property
    def total_files(self) -> int:
        return sum(self.files.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    def kinds(self) -> str:
        return ", ".join(f"{k} {self.files[k]:,} / {mb(self.bytes[k])} MB" for k in sorted(self.files))


@dataclass
class MilvusPeerRun:
    """One run: one Milvus at one sync period, DeltaNode's mirror beside it."""
    sync_period: float
    seconds: float
    rate: float
    rows: int
    dim: int
    inserts: int = 0
    rows_inserted: int = 0
    insert_ack_p50: float = 0.0          # s an Insert call took
    insert_late_max: float = 0.0         # most an insert started after its slot
    duckdb: Latencies = field(default_factory=lambda: Latencies("DeltaNode: readable by DuckDB"))
    commit: Latencies = field(default_factory=lambda: Latencies("DeltaNode: Delta commit"))
    milvus: Latencies = field(default_factory=lambda: Latencies("Milvus: pk binlog written"))
    duckdb_query_p50: float = 0.0
    duckdb_rows_at_end: int = 0          # count(*) of delta_scan at the end
    duckdb_all_keys: bool = False        # every measured key read back by DuckDB at the end
    milvus_binlogs: int = 0              # pk-field insert binlogs read
    deltanode_written: Written = field(default_factory=Written)
    milvus_written: Written = field(default_factory=Written)
    deltanode_cores: float = 0.0
    milvus_cores: float = 0.0
    watch_seconds: float = 0.0           # the insert window plus the grace actually used
    trigger: str = "1s (default)"        # DeltaNode's datanode.trigger.interval
    jitter: bool = True                  # each insert at a random moment of its slot

    @property
    def label(self) -> str:
        p = self.sync_period
        label = f"{p:g} s (default)" if p == DEFAULT_SYNC_PERIOD else f"{p:g} s"
        return label if self.trigger == "1s (default)" else f"{label}, DeltaNode trigger {self.trigger}"

    def ratio(self, q: float, deltanode: str = "duckdb") -> float | None:
        """Milvus's ``q``-th percentile over DeltaNode's (``duckdb``: as polled, or ``commit``), a
        lower bound when Milvus's is."""
        m, _ = self.milvus.stat(q)
        d, _ = getattr(self, deltanode).stat(q)
        return None if m is None or not d else m / d


@dataclass
class MilvusPeerResult:
    runs: list[MilvusPeerRun]

    def target_default(self) -> bool | None:
        """At Milvus's defaults: a row durable in DeltaNode >= 100x sooner (p50 and p99)."""
        runs = [r for r in self.runs if r.sync_period == DEFAULT_SYNC_PERIOD]
        if not runs:
            return None
        return all((r.ratio(50) or 0) >= 100 and (r.ratio(99) or 0) >= 100 and r.duckdb_all_keys for r in runs)

    @staticmethod
    def met_sooner(r: MilvusPeerRun) -> bool:
        """DeltaNode sooner than Milvus (p50 and p99), every key read back by DuckDB."""
        return (r.ratio(50) or 0) > 1 and (r.ratio(99) or 0) > 1 and r.duckdb_all_keys

    def target_minimum(self) -> bool | None:
        """At Milvus's lowest sync period run: DeltaNode sooner (p50 and p99)."""
        runs = [r for r in self.runs if r.sync_period != DEFAULT_SYNC_PERIOD]
        return self.met_sooner(min(runs, key=lambda r: r.sync_period)) if runs else None

    def render(self) -> str:
        rows = []
        for r in self.runs:
            for lat, written, cores in ((r.duckdb, r.deltanode_written, r.deltanode_cores), (r.commit, None, None),
                                        (r.milvus, r.milvus_written, r.milvus_cores)):
                rows.append([r.label if lat is r.duckdb else "", lat.what, f"{len(lat.seen)}/{lat.inserts}",
                             lat.cell(50), lat.cell(99), lat.cell(100),
                             f"{written.total_files:,}" if written else "", mb(written.total_bytes) if written else "",
                             f"{cores:.2f}" if cores is not None else ""])
        out = [table(["Milvus syncPeriod", "insert ack ->", "inserts seen", "p50 s", "p99 s", "max s",
                      "files written", "MB written", "cores"], rows)]
        for r in self.runs:
            ratios = "; by commit ".join("  ".join(
                f"p{q:g} -" if x is None else f"p{q:g} {x:,.{0 if x >= 10 else 2}f}x"
                for q in (50, 99) for x in [r.ratio(q, side)]) for side in ("duckdb", "commit"))
            dn, mv = r.deltanode_written, r.milvus_written
            out.append(f"  syncPeriod {r.label}: {r.inserts} inserts of {r.rows} "
                       f"rows x {r.dim} dims at {r.rate:g}/s{' (random phase)' if r.jitter else ''} for "
                       f"{r.seconds:g} s (Insert call p50 {r.insert_ack_p50 * 1000:.0f} ms, latest start "
                       f"{r.insert_late_max * 1000:.0f} ms after its slot), watched {r.watch_seconds:.0f} s; "
                       f"Milvus / DeltaNode, by DuckDB: {ratios}")
            out.append(f"    DeltaNode wrote {dn.kinds()} ({dn.files_at_end:,} files, {mb(dn.bytes_at_end)} MB at "
                       f"the end); DuckDB: count(*) {r.duckdb_rows_at_end:,}, every key read back: "
                       f"{r.duckdb_all_keys}, query p50 {r.duckdb_query_p50 * 1000:.0f} ms")
            out.append(f"    Milvus wrote {mv.kinds() or 'nothing'} ({mv.files_at_end:,} files, {mb(mv.bytes_at_end)} "
                       f"MB at the end); pk binlogs read: {r.milvus_binlogs}")
        targets = [f"at Milvus's defaults (DeltaNode >= 100x sooner, p50 and p99): {verdict(self.target_default())}"]
        targets += [f"at syncPeriod {r.label} (DeltaNode sooner, p50 and p99): {verdict(self.met_sooner(r))}"
                    for r in self.runs if r.sync_period != DEFAULT_SYNC_PERIOD]
        out.append("  target " + "; ".join(targets))
        out.append("  cores: DeltaNode's process tree (launcher, driver, JVM, Python workers) and the whole Milvus "
                   "standalone process (proxy, coordinators, DataNode, QueryNode, IndexNode), over the watch")
        return "\n".join(out)


# --- watching the two storages -----------------------------------------------------------------
class TreeWatch:
    """Every file seen under ``root``: its largest size, by kind (``kind(relative path)``)."""

    def __init__(self, root: Path, kind) -> None:
        self.root, self.kind = root, kind
        self.sizes: dict[str, int] = {}

    def scan(self) -> dict[str, int]:
        now = {}
        for dirpath, _, names in os.walk(self.root):
            for n in names:
                p = os.path.join(dirpath, n)
                try:
                    now[p] = os.stat(p).st_size
                except OSError:
                    continue
        for p, s in now.items():
            if s > self.sizes.get(p, -1):
                self.sizes[p] = s
        return now

    def written(self) -> Written:
        now = self.scan()
        w = Written(files_at_end=len(now), bytes_at_end=sum(now.values()))
        for p, s in self.sizes.items():
            k = self.kind(os.path.relpath(p, self.root))
            w.files[k] = w.files.get(k, 0) + 1
            w.bytes[k] = w.bytes.get(k, 0) + s
        return w


def _deltanode_kind(rel: str) -> str:
    """_delta_log (commits, checkpoints), _pk_bloom (the segments' key filters), data (binlog files)."""
    for kind in ("_delta_log", "_pk_bloom"):
        if f"/{kind}/" in f"/{rel}":
            return kind
    return "data"


def _milvus_kind(rel: str) -> str:
    top = rel.split(os.sep, 1)[0]
    return top if top in ("insert_log", "stats_log", "delta_log") else "other"


class Watcher:
    """A thread: DuckDB polled for the pending inserts' keys; Milvus's pk binlogs read as they
    appear; both storage trees listed."""

    def __init__(self, table_uri: str, milvus_collection_dir: Path, pk_field: int, delta_tree: TreeWatch,
                 milvus_tree: TreeWatch, poll: float, poll_files: float) -> None:
        self.table_uri, self.milvus_collection_dir, self.pk_field = table_uri, milvus_collection_dir, pk_field
        self.delta_tree, self.milvus_tree = delta_tree, milvus_tree
        self.poll, self.poll_files = poll, poll_files
        self.lock = threading.Lock()
        self.keys: dict[int, range] = {}        # insert -> its keys
        self.duckdb_seen: dict[int, float] = {}  # insert -> end of the first query that read all its keys
        self.pk_binlog: dict[int, float] = {}   # key -> mtime of the first pk binlog holding it
        self.binlogs_read: set[str] = set()
        self.query_seconds: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._duckdb, daemon=True, name="peer-duckdb"),
                         threading.Thread(target=self._files, daemon=True, name="peer-files")]

    def add(self, insert: int, keys: range) -> None:
        with self.lock:
            self.keys[insert] = keys

    def start(self) -> Watcher:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def duckdb_pending(self) -> list[int]:
        with self.lock:
            return [i for i in self.keys if i not in self.duckdb_seen]

    def milvus_pending(self) -> list[int]:
        with self.lock:
            return [i for i, ks in self.keys.items() if not all(k in self.pk_binlog for k in ks)]

    def _duckdb(self) -> None:
        import duckdb

        from .visibility import duckdb_connection
        with duckdb_connection(threads=1) as con:
            while not self._stop.is_set():
                started = time.monotonic()
                with self.lock:
                    pending = {i: self.keys[i] for i in self.keys if i not in self.duckdb_seen}
                if pending:
                    lo = min(ks.start for ks in pending.values())
                    try:
                        found = {r[0] for r in con.execute(
                            f'SELECT "{PK}" FROM delta_scan(\'{self.table_uri}\') WHERE "{PK}" >= {lo}').fetchall()}
                    except duckdb.Error as e:   # the table before its first commit
                        found = set()
                        if len(self.errors) < 5 and "No files" not in str(e) and "does not exist" not in str(e):
                            self.errors.append(f"duckdb: {e}")
                    t = time.time()
                    self.query_seconds.append(time.monotonic() - started)
                    with self.lock:
                        for i, ks in pending.items():
                            if all(k in found for k in ks):
                                self.duckdb_seen[i] = t
                self._stop.wait(max(0.0, started + self.poll - time.monotonic()))

    def _files(self) -> None:
        from deltanode.milvus_import.binlog_format import BinlogFormatError, read_binlog
        while not self._stop.is_set():
            started = time.monotonic()
            self.delta_tree.scan()
            self.milvus_tree.scan()
            # insert_log/{collection}/{partition}/{segment}/{pk field}/{logID}
            for f in sorted(self.milvus_collection_dir.glob(f"*/*/{self.pk_field}/*")):
                p = str(f)
                if p in self.binlogs_read:
                    continue
                try:
                    mtime = f.stat().st_mtime_ns / 1e9
                    desc, values = read_binlog(f.read_bytes(), where=p)
                except (OSError, BinlogFormatError):
                    continue     # being written: read at the next listing
                if desc.field_id != self.pk_field:
                    continue
                self.binlogs_read.add(p)
                with self.lock:
                    for k in values.to_pylist():
                        if k not in self.pk_binlog or mtime < self.pk_binlog[k]:
                            self.pk_binlog[k] = mtime
            self._stop.wait(max(0.0, started + self.poll_files - time.monotonic()))


def commit_times(table_uri: str) -> dict[int, float]:
    """Each key of the table -> the modification time of the first ``_delta_log`` commit that added
    a file holding it (every JSON commit, oldest first; each added file read for its keys)."""
    import pyarrow.parquet as pq
    log = Path(table_uri) / "_delta_log"
    out: dict[int, float] = {}
    if not log.is_dir():
        return out
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json") and n[:20].isdigit()):
        commit = log / name
        t = commit.stat().st_mtime_ns / 1e9
        for line in commit.read_text().splitlines():
            if not line.strip():
                continue
            add = json.loads(line).get("add")
            if not add:
                continue
            path = add["path"]
            if "://" in path:
                file = urllib.parse.urlparse(path).path
            else:
                file = str(Path(table_uri) / urllib.parse.unquote(path))
            try:
                keys = pq.read_table(file, columns=[PK]).column(PK).to_pylist()
            except (OSError, KeyError):
                continue
            for k in keys:
                out.setdefault(k, t)
    return out


# --- CPU of a process tree ------------------------------------------------------------------
class TreeCpu:
    """CPU seconds of a process and its descendants: each pid's largest reading, summed (a process
    that exits keeps what it used up to the last sample)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu: dict[int, float] = {}

    def sample(self) -> float:
        from tests.integration.processes import descendants
        tick = os.sysconf("SC_CLK_TCK")
        for p in descendants(self.pid):
            try:
                with open(f"/proc/{p}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                self.cpu[p] = max(self.cpu.get(p, 0.0), (int(rest[11]) + int(rest[12])) / tick)
            except (OSError, IndexError, ValueError):
                continue
        return sum(self.cpu.values())


# --- one run ----------------------------------------------------------------------------------
def _say(msg: str) -> None:
    print(f"[milvus_peer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_one(sync_period: float, *, seconds: float, rate: float = 1.0, rows: int = 50, dim: int = 128,
            grace: float = 30.0, poll: float = 0.25, poll_files: float = 0.5, jitter: bool = True,
            trigger: str | None = None, work_dir: Path | None = None, keep: bool = False) -> MilvusPeerRun:
    """One Milvus at ``sync_period`` s, DeltaNode's mirror beside it (``trigger``: its
    datanode.trigger.interval, default DeltaNode's). ``jitter``: each insert at a random moment of
    its 1/rate slot (the rate stays steady; a fixed phase would meet DeltaNode's cycle and Milvus's
    time ticks at one point of theirs for the whole run), else at the slot's start."""
    sys.path.insert(0, str(ROOT))   # the Milvus server and client the tests use
    from deltanode.delta.layout import StorageLayout
    from deltanode.standalone.kafka_server import EmbeddedKafka
    from deltanode.standalone.services import EmbeddedEtcd, free_port
    from tests.integration.milvus_client import MilvusClient
    from tests.integration.milvus_server import MilvusServer
    from tests.integration.processes import start as start_process
    from tests.integration.processes import stop as stop_process

    class Milvus(MilvusServer):
        def config(self) -> dict[str, object]:
            c = super().config()
            c["dataNode.segment.syncPeriod"] = sync_period
            return c

    result = MilvusPeerRun(sync_period=sync_period, seconds=seconds, rate=rate, rows=rows, dim=dim,
                           trigger=trigger or "1s (default)", jitter=jitter)
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="deltanode-bench-peer-"))
    work.mkdir(parents=True, exist_ok=True)
    mirror = None
    try:
        with EmbeddedEtcd(work / "etcd") as etcd, EmbeddedKafka(work / "kafka") as kafka:
            t0 = time.monotonic()
            with Milvus(etcd.endpoint, kafka.bootstrap_servers, work / "milvus", root_path="peer") as milvus, \
                    MilvusClient(milvus.uri, timeout=120) as mc:
                _say(f"Milvus 2.3.5 up in {time.monotonic() - t0:.1f} s (syncPeriod {sync_period:g} s), "
                     f"data {milvus.data_dir}")
                storage = StorageLayout(str(work / "delta"))
                env = dict(os.environ, DELTANODE_ETCD_ENDPOINTS=etcd.endpoint,
                           DELTANODE_ETCD_ROOT="deltanode-peer/meta",
                           DELTANODE_MILVUS_META_ROOT=milvus.meta_root,
                           DELTANODE_MQ_KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
                           DELTANODE_MILVUS_STORAGE_ROOT=str(milvus.data_dir / "data"),
                           DELTANODE_STORAGE_ROOT=str(storage.root), DELTANODE_METRICS_PORT=str(free_port()),
                           DELTANODE_EMBEDDED_DATA_DIR=str(work / "var"))
                if trigger:
                    env["DELTANODE_DATANODE_TRIGGER_INTERVAL"] = trigger
                mirror = start_process("standalone", ROOT / "conf" / "milvus-mirror.conf", work / "mirror.log", env=env)
                made = mc.create_collection("peer", [
                    {"name": PK, "data_type": "Int64", "is_primary_key": True},
                    {"name": VEC, "data_type": "FloatVector", "dim": dim}], load=False)
                cid = made["collection_id"]
                pk_field = next(f["field_id"] for f in made["fields"] if f["name"] == PK)
                table_uri = storage.insert_log(cid)
                watcher = Watcher(table_uri, milvus.data_dir / "data" / "insert_log" / str(cid), pk_field,
                                  TreeWatch(work / "delta", _deltanode_kind),
                                  TreeWatch(milvus.data_dir / "data", _milvus_kind), poll, poll_files)
                rng = np.random.default_rng(49)
                phase = np.random.default_rng(4949)

                def batch(lo: int, n: int) -> list[dict]:
                    vecs = rng.random((n, dim), dtype=np.float32)
                    return [{PK: lo + k, VEC: v.tolist()} for k, v in enumerate(vecs)]

                # Warm-up: one insert of negative keys, until DeltaNode's table shows it through DuckDB
                # (the mirror's Spark start and its watch of the new vchannel are not measured).
                watcher.start()
                mc.insert("peer", batch(-rows, rows))
                watcher.add(-1, range(-rows, 0))
                t0 = time.monotonic()
                while watcher.duckdb_pending():
                    if mirror.poll() is not None:
                        raise RuntimeError(f"the mirror exited ({mirror.returncode}); see {work / 'mirror.log'}")
                    if time.monotonic() - t0 > 600:
                        raise RuntimeError(f"the mirror did not commit the warm-up insert in 600 s; "
                                           f"{work / 'mirror.log'}")
                    time.sleep(0.2)
                _say(f"DeltaNode's mirror committed the warm-up insert {time.monotonic() - t0:.1f} s after it; "
                     f"inserting {rows} rows x {dim} dims {rate:g}/s for {seconds:g} s")
                with watcher.lock:
                    del watcher.keys[-1]

                cpu_d, cpu_m = TreeCpu(mirror.pid), TreeCpu(milvus.pid)
                c0_d, c0_m, w0 = cpu_d.sample(), cpu_m.sample(), time.monotonic()
                acks: dict[int, float] = {}
                calls: list[float] = []
                start = time.monotonic()
                n = int(round(seconds * rate))
                last_log = start
                for i in range(n):
                    slot = start + (i + (phase.random() if jitter else 0.0)) / rate
                    wait = slot - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    result.insert_late_max = max(result.insert_late_max, time.monotonic() - slot)
                    rows_i = batch(i * rows, rows)
                    c = time.monotonic()
                    mc.insert("peer", rows_i)
                    acks[i] = time.time()
                    calls.append(time.monotonic() - c)
                    watcher.add(i, range(i * rows, (i + 1) * rows))
                    if time.monotonic() - last_log >= 60:
                        last_log = time.monotonic()
                        cpu_d.sample(), cpu_m.sample()
                        _say(f"{i + 1}/{n} inserts; not yet readable in DeltaNode: {len(watcher.duckdb_pending())}, "
                             f"not yet in a Milvus binlog: {len(watcher.milvus_pending())}")
                    if mirror.poll() is not None:
                        raise RuntimeError(f"the mirror exited ({mirror.returncode}); see {work / 'mirror.log'}")
                result.inserts, result.rows_inserted = n, n * rows
                result.insert_ack_p50 = percentile(calls, 50) if calls else 0.0
                _say(f"{n} inserts done; watching up to {grace:g} s more")
                until = time.monotonic() + grace
                while time.monotonic() < until and (watcher.duckdb_pending() or watcher.milvus_pending()):
                    time.sleep(0.25)
                t_end = time.time()
                result.watch_seconds = time.monotonic() - start
                watcher.stop()
                result.deltanode_cores = (cpu_d.sample() - c0_d) / (time.monotonic() - w0)
                result.milvus_cores = (cpu_m.sample() - c0_m) / (time.monotonic() - w0)

                # Per insert: the three latencies (or the wait so far).
                commits = commit_times(table_uri)
                for i in range(n):
                    ks = range(i * rows, (i + 1) * rows)
                    if i in watcher.duckdb_seen:
                        result.duckdb.seen.append(watcher.duckdb_seen[i] - acks[i])
                    else:
                        result.duckdb.pending.append(t_end - acks[i])
                    if all(k in commits for k in ks):
                        result.commit.seen.append(max(commits[k] for k in ks) - acks[i])
                    else:
                        result.commit.pending.append(t_end - acks[i])
                    if all(k in watcher.pk_binlog for k in ks):
                        result.milvus.seen.append(max(watcher.pk_binlog[k] for k in ks) - acks[i])
                    else:
                        result.milvus.pending.append(t_end - acks[i])
                result.duckdb_query_p50 = percentile(watcher.query_seconds, 50) if watcher.query_seconds else 0.0
                result.milvus_binlogs = len(watcher.binlogs_read)
                # DuckDB's view at the end: every row, every measured key.
                from .visibility import duckdb_connection
                with duckdb_connection(threads=1) as con:
                    result.duckdb_rows_at_end = con.execute(
                        f"SELECT count(*) FROM delta_scan('{table_uri}')").fetchone()[0]
                    got = con.execute(f'SELECT count(DISTINCT "{PK}") FROM delta_scan(\'{table_uri}\') '
                                      f'WHERE "{PK}" >= 0 AND "{PK}" < {n * rows}').fetchone()[0]
                    result.duckdb_all_keys = got == n * rows
                stop_process(mirror, signal.SIGTERM)
                mirror = None
                result.deltanode_written = watcher.delta_tree.written()
                result.milvus_written = watcher.milvus_tree.written()
                for e in watcher.errors:
                    _say(e)
        return result
    finally:
        if mirror is not None and mirror.poll() is None:
            stop_process(mirror, signal.SIGTERM)
        if keep or work_dir:
            _say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def sync_periods(choice: str) -> list[float]:
    """``default``, ``both`` (default and 1), seconds, or a comma list of them (``default,1,0``)."""
    out: list[float] = []
    for part in choice.split(","):
        part = part.strip()
        if part == "default":
            out.append(DEFAULT_SYNC_PERIOD)
        elif part == "both":
            out += [DEFAULT_SYNC_PERIOD, MINIMUM_SYNC_PERIOD]
        else:
            value = float(part)
            if not value >= 0:
                raise ValueError(f"a sync period of {value} s")
            out.append(value)
    return out


def default_seconds(sync_period: float) -> float:
    """Long enough for Milvus to write a binlog: 660 s at the 600 s default, 120 s otherwise."""
    return max(120.0, sync_period * 1.1)


def run(*, sync_period: str = "both", seconds: float | None = None, rate: float = 1.0, rows: int = 50,
        dim: int = 128, grace: float = 30.0, poll: float = 0.25, jitter: bool = True, trigger: str | None = None,
        work_dir: Path | None = None, keep: bool = False) -> MilvusPeerResult:
    """Every run ``sync_period`` asks for (``default``, ``both`` or seconds), one after the other."""
    runs = []
    for p in sync_periods(sync_period):
        wd = Path(work_dir) / f"sync{p:g}" if work_dir else None
        runs.append(run_one(p, seconds=seconds if seconds is not None else default_seconds(p), rate=rate,
                            rows=rows, dim=dim, grace=grace, poll=poll, jitter=jitter, trigger=trigger,
                            work_dir=wd, keep=keep))
    return MilvusPeerResult(runs)


def load(path: Path) -> MilvusPeerResult:
    """The runs a ``--json`` file holds (to print their table again)."""
    runs = []
    for doc in json.loads(Path(path).read_text()):
        for k in ("duckdb", "commit", "milvus"):
            doc[k] = Latencies(**doc[k])
        for k in ("deltanode_written", "milvus_written"):
            doc[k] = Written(**doc[k])
        runs.append(MilvusPeerRun(**doc))
    return MilvusPeerResult(runs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.milvus_peer",
                                description=__doc__.split("\n\n")[0],
                                epilog="Needs build/bootstrap.sh and build/milvus_env.sh. A run at the default "
                                       "sync period takes ~12 min; --sync-period 1 --seconds 60 ~2 min.")
    p.add_argument("--seconds", type=float, help="how long to insert (default 660 at syncPeriod 600, else 120)")
    p.add_argument("--sync-period", default="both", metavar="default|both|SECONDS[,...]",
                   help="Milvus's dataNode.segment.syncPeriod: default (600 s), SECONDS (1; 0 is the lowest "
                        "Milvus takes: a sync at every flowgraph pass with rows), both (600 then 1), or a comma "
                        "list (default,1,0), a Milvus each, one after the other (default both)")
    p.add_argument("--trigger", metavar="DURATION",
                   help="DeltaNode's datanode.trigger.interval (e.g. 200ms; default DeltaNode's, 1s)")
    p.add_argument("--no-jitter", action="store_true",
                   help="each insert at the start of its 1/rate slot (default: at a random moment of it)")
    p.add_argument("--rate", type=float, default=1.0, help="inserts a second (default 1)")
    p.add_argument("--rows", type=int, default=50, help="rows an insert (default 50)")
    p.add_argument("--dim", type=int, default=128, help="FloatVector dimension (default 128)")
    p.add_argument("--grace", type=float, default=30.0,
                   help="s to keep watching after the last insert for rows not yet durable (default 30)")
    p.add_argument("--poll", type=float, default=0.25, help="s between DuckDB queries (default 0.25)")
    p.add_argument("--work-dir", type=Path, help="keep everything here (default: a temporary directory, removed)")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.rate <= 0 or args.rows <= 0 or args.dim <= 0:
        p.error("--rate, --rows and --dim must be positive")
    try:
        sync_periods(args.sync_period)
    except ValueError:
        p.error(f"--sync-period: default, both, seconds >= 0 or a comma list of them, not {args.sync_period!r}")
    info = machine_info()
    result = run(sync_period=args.sync_period, seconds=args.seconds, rate=args.rate, rows=args.rows, dim=args.dim,
                 grace=args.grace, poll=args.poll, jitter=not args.no_jitter, trigger=args.trigger,
                 work_dir=args.work_dir)
    print(f"Milvus 2.3.5 (Kafka) and DeltaNode's mirror beside it: insert acknowledged -> durable "
          f"({info['nproc']} cores, {info['memory']}, load {info['loadavg']})")
    print(result.render())
    if args.json:
        from dataclasses import asdict
        args.json.write_text(json.dumps([asdict(r) for r in result.runs], indent=1))
    return 0 if all(r.duckdb_all_keys for r in result.runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
