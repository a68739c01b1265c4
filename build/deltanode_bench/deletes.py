"""The delete benchmark: ``build/bench.sh --deletes`` (``--deletes-only``: nothing else).

On an embedded broker of its own, one collection (Int64 pk, a VarChar, a 128-dim FloatVector;
2 shards, a TimeTick every 200 ms on each pchannel, as rootcoord writes them):

1. backlog: ``--deletes-rows`` rows as InsertRequests of 1,000 rows, produced before a DataNode
   (Spark local[2], the shared pipeline) starts; once it committed them, one round of its own
   compactor (its timer is off: no round runs during the phases, so both see the same files);
2. with deletes: ``--deletes-seconds`` of inserts at ``--deletes-insert-mb-s`` (wire bytes, the
   collection's, shards in turn) and ``--delete-rate`` keys a second deleted in batches of
   ``--delete-batch``: random keys among the rows committed so far, never one twice, each
   batch one DeleteRequest per shard holding some of its keys (as Milvus's proxy routes a
   delete; partition -1, all). DuckDB polls the insert_log every 100 ms for the keys of the
   batches it still finds (``visibility``);
3. without deletes: the same inserts on the same DataNode and collection; DuckDB polls the same
   way for a batch of keys never deleted, so the reader loads the cores as in phase 2.

Each phase ends when everything produced is committed (and, with deletes, every batch was seen
deleted, up to a minute). Then the collection's DuckDB row count is checked against the rows
inserted minus the keys deleted, and that none of those keys is left. Per phase: insert ->
durable (produce() to the insert_log commit covering the message, as the main benchmark), delete
-> insert_log commit and delete -> visible to DuckDB per batch, deletion-vector bytes and log
growth per deleted row, the DataNode's cores and RSS, and the cycle phases (the DataNode's cycle
reports and, per delete-marking job, what its tasks read and how long they ran).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from deltanode.delta.delta_log import DeltaLog
from deltanode.executor.delete_mark_task import ALL_PARTITIONS

from . import latency as lat
from .delete_load import KeyPicker, Stream, by_shard, pace
from .procs import WindowStats, window
from .report import machine_info, mb, mib, secs, table, verdict
from .visibility import Poller, VisibilityTracker, duckdb_connection
from .workload import ROWS_PER_MESSAGE, BenchCollection, Sent, make_collection

if TYPE_CHECKING:
    from .datanode_run import DataNode
    from .main import Bench

DIM, SHARDS, PK = 128, 2, "pk"
CONTROL = -1            # the batch of never-deleted keys the poller asks for in the phase without deletes
POLL_INTERVAL = 0.1
DRAIN = 60.0            # longest wait, after a phase, for its last batches to show deleted
# Rows a shard sends to one segment before the next: Milvus's DataCoord stops assigning a segment
# once sealed, and DeltaNode seals one at 12% of 1,024 MB (~123 MB, ~230,000 of these rows) and
# quarantines the rows still sent to it (vchannel/seal_policy.py).
SEGMENT_ROWS = 200_000
VISIBLE_P99 = 2.0       # the targets
INSERT_P99_RATIO = 1.2


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] deletes: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class LogSize:
    json: int            # bytes of the commit files
    checkpoints: int     # bytes of the checkpoint files


def log_size(table_uri: str) -> LogSize:
    """The size of a table's ``_delta_log``: commits and checkpoints."""
    root = os.path.join(table_uri, "_delta_log")
    sizes = [(name, os.path.getsize(os.path.join(root, name))) for name in os.listdir(root)]
    return LogSize(sum(n for name, n in sizes if name.endswith(".json")),
                   sum(n for name, n in sizes if ".checkpoint." in name))


def tree_size(path: str) -> int:
    """Bytes of the files under ``path``."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


@dataclass(frozen=True)
class Files:
    count: int
    rows: int            # in the files, deleted ones included
    deleted: int
    largest: int         # bytes


def live_files(table_uri: str) -> Files:
    adds = list(DeltaLog.open(table_uri).live_files().values())
    return Files(len(adds), sum(a.rows for a in adds), sum(a.deleted for a in adds), max(a.size for a in adds))


@dataclass
class Phase:
    label: str
    deletes: bool
    t0: float
    t1: float                      # the load stopped
    t_settled: float               # all of it committed (and, with deletes, seen deleted or DRAIN passed)
    bench_cpu: float               # this process's CPU seconds during the load: producer, ticks, DuckDB
    tracker: VisibilityTracker
    polls: list[float]             # DuckDB query durations
    batches: dict[int, list[Sent]]  # batch id -> its DeleteRequests
    log_before: LogSize
    log_after: LogSize
    delete_table_growth: int       # bytes added under the delta_log table (delete binlogs and log)


@dataclass(frozen=True)
class Check:
    inserted: int
    deleted: int                   # distinct keys
    counted: int                   # DuckDB count(*)
    left: int                      # deleted keys DuckDB still returns

    @property
    def ok(self) -> bool:
        return self.counted == self.inserted - self.deleted and self.left == 0


class DeleteBench:
    def __init__(self, bench: Bench) -> None:
        self.bench, self.args = bench, bench.args
        self.picker = KeyPicker()
        self._waiting: deque[tuple[str, Sent]] = deque()   # (vchannel, insert) not yet known committed
        self._turn = itertools.cycle(range(SHARDS))
        self._rows = [0] * SHARDS                            # rows sent per shard
        self._batch_ids = itertools.count()
        self.phases: list[Phase] = []
        self.coll: BenchCollection | None = None
        self.node: DataNode | None = None

    def table(self, kind: str) -> str:
        """The collection's ``insert_log`` or ``delta_log`` table."""
        return os.path.join(self.bench.storage_root, kind, str(self.coll.collection_id))

    # -- sending -----------------------------------------------------------------------------
    def _insert(self) -> None:
        """One InsertRequest on the next shard, into its current segment (``SEGMENT_ROWS``)."""
        s = next(self._turn)
        p, v = self.coll.pchannels[s], self.coll.vchannels[s]
        rec = self.coll.producer.insert_message(p, v, self.coll.segments[v] + SHARDS * (self._rows[s] // SEGMENT_ROWS))
        self._rows[s] += rec.rows
        self._waiting.append((v, rec))

    def _admit(self) -> None:
        """Inserts the DataNode committed become keys deletes may pick (a key picked before its
        row is committed would look deleted to DuckDB at once)."""
        self.node.poll()
        while self._waiting:
            v, rec = self._waiting[0]
            if not 0 <= rec.offset < self.node.committed(v):
                return
            self._waiting.popleft()
            self.picker.add(rec.first_pk, rec.rows, self.coll.vchannels.index(v))

    def _delete_batch(self, tracker: VisibilityTracker, batches: dict[int, list[Sent]]) -> None:
        self._admit()
        keys = self.picker.pick(self.args.delete_batch)
        batch_id, t = next(self._batch_ids), time.time()
        batches[batch_id] = [self.coll.producer.delete_keys(self.coll.pchannels[s], self.coll.vchannels[s],
                                                            ALL_PARTITIONS, part)
                             for s, part in by_shard(keys, self.picker.shard_of).items()]
        tracker.add(batch_id, keys, t)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> DeleteRun:
        a = self.args
        self.coll = make_collection(self.bench.broker, int(time.time()), DIM, SHARDS)
        try:
            per_shard = max(1, a.deletes_rows // (ROWS_PER_MESSAGE * SHARDS))
            say(f"producing {per_shard * SHARDS * ROWS_PER_MESSAGE:,} rows ({per_shard} InsertRequests per shard)")
            for _ in range(per_shard * SHARDS):
                self._insert()
            self.coll.producer.flush_producer(120)
            targets = self.coll.settled_targets()
            self.node = self.bench.node(self.coll, compaction_interval=0, stream_cycles=True, log_level="INFO",
                                        trace_marks=True).start()
            try:
                return self._measure(targets)
            finally:
                self.node.stop()
        finally:
            self.coll.close()

    def _measure(self, targets: dict[str, int]) -> DeleteRun:
        a, node = self.args, self.node
        node.wait_ready()
        backlog_bytes = sum(s.size for s in self.coll.producer.sent if s.rows)
        say("DataNode started; committing the backlog")
        t_done = node.wait_committed(targets, timeout=120 + backlog_bytes / 1e6)
        self._admit()
        backlog_s = t_done - node.first("flowgraphs_started")["t"]
        uri = self.table("insert_log")
        before = live_files(uri)
        say(f"backlog committed in {backlog_s:.0f} s, {before.count} files; one compaction round")
        compaction = node.compact()
        if compaction.get("error"):
            raise RuntimeError(f"the compaction round failed: {compaction['error']}")
        after = live_files(uri)
        insert_size = max(s.size for s in self.coll.producer.sent if s.rows)
        for label, deletes in (("with deletes", True), ("without deletes", False)):
            self.phases.append(self._phase(label, deletes, insert_size / (a.deletes_insert_mb_s * 1e6)))
        check = self._check()
        say(f"DuckDB counts {check.counted:,} rows, {check.inserted:,} inserted - {check.deleted:,} deleted: "
            f"{'right' if check.ok else 'WRONG'}")
        return DeleteRun(self.coll, node, uri, self.phases, check, backlog_bytes, backlog_s, before, after,
                         compaction, insert_size)

    def _phase(self, label: str, deletes: bool, insert_interval: float) -> Phase:
        a = self.args
        uri, delete_table = self.table("insert_log"), self.table("delta_log")
        tracker = VisibilityTracker()
        batches: dict[int, list[Sent]] = {}
        streams = [Stream(insert_interval, self._insert)]
        if deletes:
            streams.append(Stream(a.delete_batch / a.delete_rate, lambda: self._delete_batch(tracker, batches)))
        else:
            tracker.add(CONTROL, self.picker.sample(a.delete_batch), time.time())
        log_before, deletes_before = log_size(uri), tree_size(delete_table)
        poller = Poller(uri, PK, tracker, POLL_INTERVAL).start()
        try:
            say(f"{label}: {a.deletes_seconds:.0f} s")
            t0, cpu0 = time.time(), time.process_time()
            pace(streams, a.deletes_seconds, time.monotonic, time.sleep)
            t1, cpu1 = time.time(), time.process_time()
            self.coll.producer.flush_producer()
            self.node.wait_committed(self.coll.settled_targets(), timeout=120 + a.deletes_seconds * 5)
            self._admit()
            deadline = time.monotonic() + DRAIN
            while deletes and tracker.pending and time.monotonic() < deadline:
                time.sleep(POLL_INTERVAL)
            t_settled = time.time()
        finally:
            poller.stop()
        return Phase(label, deletes, t0, t1, t_settled, cpu1 - cpu0, tracker, poller.durations, batches, log_before,
                     log_size(uri), tree_size(delete_table) - deletes_before)

    def _check(self) -> Check:
        inserted = sum(s.rows for s in self.coll.producer.sent if s.rows and s.offset >= 0 and not s.error)
        picked = pa.table({"k": pa.array(sorted(self.picker.picked), pa.int64())})
        uri = self.table("insert_log")
        with duckdb_connection(threads=2) as con:
            counted = con.execute(f"SELECT count(*) FROM delta_scan('{uri}')").fetchone()[0]
            con.register("deleted_keys", picked)
            left = con.execute(f'SELECT count(*) FROM delta_scan(\'{uri}\') t JOIN deleted_keys d '
                               f'ON t."{PK}" = d.k').fetchone()[0]
        return Check(inserted, len(self.picker.picked), counted, left)


# -- figures -----------------------------------------------------------------------------------
@dataclass
class DeleteRun:
    coll: BenchCollection
    node: DataNode
    uri: str                       # the insert_log table
    phases: list[Phase]
    check: Check
    backlog_bytes: int
    backlog_s: float
    files_before: Files
    files_after: Files
    compaction: dict               # the compactor's RoundReport
    insert_size: int               # bytes of one InsertRequest


@dataclass
class Figures:
    """One phase, measured."""

    phase: Phase
    inserts: int
    insert_bytes: int
    insert_lat: list[float]
    uncommitted: int
    requests: int                  # DeleteRequests
    keys: int
    to_commit: list[float]         # per batch: produce() -> the insert_log commit marking it
    visible: list[float]           # per batch: produce() -> DuckDB no longer finds its keys
    stats: WindowStats | None
    cycles: list[dict]             # cycle reports of the load
    settled_cycles: list[dict]     # ... up to the phase's end
    marks: list[dict]              # mark jobs of ``cycles``

    @property
    def seconds(self) -> float:
        return self.phase.t1 - self.phase.t0

    @property
    def marked_rows(self) -> int:
        return sum(c["marked_rows"] for c in self.settled_cycles)

    @property
    def dv_bytes(self) -> int:
        return sum(c["marked_dv_bytes"] for c in self.settled_cycles)


def batch_commit_latency(requests: list[Sent], t_sent: float, vchannel_of: dict[str, str],
                         commits: dict[str, list[lat.Commit]]) -> float | None:
    """From a batch's produce() to the last insert_log commit covering one of its DeleteRequests
    (None while one is not covered)."""
    ends = []
    for r in requests:
        c = lat.commit_of(commits.get(vchannel_of[r.topic], []), r.offset)
        if r.offset < 0 or c is None:
            return None
        ends.append(c.t)
    return max(ends) - t_sent


def figures(run: DeleteRun, phase: Phase, commits: dict[str, list[lat.Commit]]) -> Figures:
    coll = run.coll
    vchannel_of = dict(zip(coll.pchannels, coll.vchannels))
    inserts = [s for s in coll.producer.sent if s.rows and phase.t0 <= s.t <= phase.t1]
    insert_lat, uncommitted = [], 0
    for p, v in vchannel_of.items():
        ls, miss = lat.latencies([(s.offset, s.t) for s in inserts if s.topic == p], commits.get(v, []))
        insert_lat, uncommitted = insert_lat + ls, uncommitted + miss
    sent_at = {i: min(r.t for r in reqs) for i, reqs in phase.batches.items()}
    to_commit = [x for i, reqs in phase.batches.items()
                 if (x := batch_commit_latency(reqs, sent_at[i], vchannel_of, commits)) is not None]
    events = run.node.events
    cycles = [e for e in events if e["ev"] == "cycle" and phase.t0 <= e["started"] <= phase.t1]
    numbers = {c["number"] for c in cycles}
    return Figures(phase, len(inserts), sum(s.size for s in inserts), insert_lat, uncommitted,
                   sum(len(r) for r in phase.batches.values()),
                   sum(r.deletes for b in phase.batches.values() for r in b),
                   to_commit, [t for i, t in phase.tracker.latencies.items() if i != CONTROL],
                   window(run.node.sampler.samples, phase.t0, phase.t1), cycles,
                   [e for e in events if e["ev"] == "cycle" and phase.t0 <= e["started"] <= phase.t_settled],
                   [e for e in events if e["ev"] == "mark" and e["cycle"] in numbers])


# -- report ------------------------------------------------------------------------------------
def _three(values: list[float]) -> str:
    """p50 / p99 / max."""
    if not values:
        return "-"
    return " / ".join(secs(x) for x in (lat.percentile(values, 50), lat.percentile(values, 99), max(values)))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def _per(n: float, d: float, digits: int = 1) -> str:
    return f"{n / d:,.{digits}f}" if d else "-"


def cycle_means(cycles: list[dict]) -> dict[str, float | None]:
    """Mean seconds per cycle of each part; ``commits`` is the Delta commits' own time, ``sync
    rest`` what the sync spent besides marking and committing (fence, planning the marks)."""
    parts = {k: _mean([c[k] for c in cycles]) for k in ("seconds", "plan_s", "job_s", "apply_s", "sync_s", "mark_s")}
    parts["commits"] = _mean([sum(c["commit_seconds"]) for c in cycles])
    parts["sync rest"] = _mean([c["sync_s"] - c["mark_s"] - sum(c["commit_seconds"]) for c in cycles])
    return parts


def _mark_rows(f: Figures) -> list[list[str]]:
    marks = f.marks
    jobs = len(marks)
    longest = [max(m["task_s"]) for m in marks]
    with_marks = [c for c in f.cycles if c["marked_files"]]
    tenth = max(1, jobs // 10)
    return [
        ["mark jobs (cycles marking rows)", f"{jobs} ({len(with_marks)})"],
        ["mark job ms / candidate files: first 10% of jobs -> last 10%",
         f"{_ms(_mean([m['job_s'] for m in marks[:tenth]]))} / "
         f"{_per(sum(m['candidates'] for m in marks[:tenth]), tenth)}"
         f" -> {_ms(_mean([m['job_s'] for m in marks[-tenth:]]))} / "
         f"{_per(sum(m['candidates'] for m in marks[-tenth:]), tenth)}" if jobs else "-"],
        ["mark job ms: whole / its longest task / rest (Spark)",
         f"{_ms(_mean([m['job_s'] for m in marks]))} / {_ms(_mean(longest))} / "
         f"{_ms(_mean([m['job_s'] - t for m, t in zip(marks, longest)]))}" if jobs else "-"],
        ["mark job: candidate files / read / skipped by bloom",
         " / ".join(_per(sum(m[k] for m in marks), jobs) for k in ("candidates", "files_read", "files_skipped"))
         if jobs else "-"],
        ["cycle marking rows: files / rows / DV KB",
         " / ".join(_per(sum(c[k] for c in with_marks) / (1000 if k == "marked_dv_bytes" else 1), len(with_marks))
                    for k in ("marked_files", "marked_rows", "marked_dv_bytes")) if with_marks else "-"],
    ]


def phase_rows(figs: list[Figures], a) -> list[list[str]]:
    """The side-by-side table's rows: a measure, then one cell per phase."""
    def row(name: str, cell) -> list[str]:
        return [name] + [cell(f) for f in figs]

    base = next((f for f in figs if not f.phase.deletes), None)
    means = {id(f): cycle_means(f.cycles) for f in figs}

    def log_per_row(f: Figures) -> str:
        growth = f.phase.log_after.json - f.phase.log_before.json
        if not f.marked_rows:
            return "-"
        over = "-" if base is None else _per(growth - (base.phase.log_after.json - base.phase.log_before.json),
                                             f.marked_rows)
        return f"{_per(growth, f.marked_rows)} / {over}"

    rows = [
        row("load seconds", lambda f: secs(f.seconds, 1)),
        row("inserts / wire MB/s", lambda f: f"{f.inserts} / {f.insert_bytes / f.seconds / 1e6:.2f}"),
        row("insert -> durable p50 / p99 / max s", lambda f: _three(f.insert_lat)),
        row("inserts not committed", lambda f: str(f.uncommitted)),
        row("delete batches / DeleteRequests / keys",
            lambda f: f"{len(f.phase.batches)} / {f.requests} / {f.keys:,}" if f.phase.deletes else "-"),
        row("delete -> insert_log commit p50 / p99 / max s", lambda f: _three(f.to_commit)),
        row("delete -> visible to DuckDB p50 / p99 / max s", lambda f: _three(f.visible)),
        row("batches never seen deleted", lambda f: str(f.phase.tracker.pending) if f.phase.deletes else "-"),
        row("DuckDB polls / query p50 / max s", lambda f: f"{len(f.phase.polls)} / "
            + (f"{secs(lat.percentile(f.phase.polls, 50))} / {secs(max(f.phase.polls))}" if f.phase.polls else "-")),
        row("rows marked deleted", lambda f: f"{f.marked_rows:,}"),
        row("DV bytes rewritten per deleted row", lambda f: _per(f.dv_bytes, f.marked_rows)),
        row("insert_log log growth: JSON / checkpoints MB", lambda f: (
            f"{mb(f.phase.log_after.json - f.phase.log_before.json)} / "
            f"{mb(f.phase.log_after.checkpoints - f.phase.log_before.checkpoints)}")),
        row("log JSON bytes per deleted row: all / over no-delete phase", log_per_row),
        row("delta_log table growth MB", lambda f: mb(f.phase.delete_table_growth)),
        row("DataNode cores: tree (driver / JVM / py workers)", lambda f: "-" if f.stats is None else (
            f"{f.stats.cores:.2f} ({f.stats.cores_driver:.2f} / {f.stats.cores_jvm:.2f} / "
            f"{f.stats.cores_workers:.2f})")),
        row("cores: machine / broker / bench (producer, DuckDB)", lambda f: "-" if f.stats is None else (
            f"{f.stats.cores_machine:.2f} / {f.stats.cores_broker:.2f} / {f.phase.bench_cpu / f.seconds:.2f}")),
        row("DataNode peak RSS MiB (driver / JVM / py workers)", lambda f: "-" if f.stats is None else (
            f"{mib(f.stats.total_rss_peak)} ({mib(f.stats.driver_peak)} / {mib(f.stats.jvm_peak)} / "
            f"{mib(f.stats.workers_peak)})")),
        row("cycles", lambda f: str(len(f.cycles))),
        row("mean cycle ms: total / plan / job / apply / sync", lambda f: " / ".join(
            _ms(means[id(f)][k]) for k in ("seconds", "plan_s", "job_s", "apply_s", "sync_s"))),
        row("mean sync ms: mark / commits / rest", lambda f: " / ".join(
            _ms(means[id(f)][k]) for k in ("mark_s", "commits", "sync rest"))),
        row("mark time, share of sync / of cycle", lambda f: (
            f"{_per(means[id(f)]['mark_s'] * 100, means[id(f)]['sync_s'], 0)}% / "
            f"{_per(means[id(f)]['mark_s'] * 100, means[id(f)]['seconds'], 0)}%") if f.cycles else "-"),
    ]
    per_phase = [_mark_rows(f) for f in figs]
    rows += [[per_phase[0][i][0]] + [p[i][1] for p in per_phase] for i in range(len(per_phase[0]))]
    return rows


def targets(figs: list[Figures], check: Check) -> list[str]:
    with_d = next(f for f in figs if f.phase.deletes)
    without = next(f for f in figs if not f.phase.deletes)
    lines = []
    if with_d.visible:
        p99 = lat.percentile(with_d.visible, 99)
        seen = with_d.phase.tracker.pending == 0
        unseen = "" if seen else f", {with_d.phase.tracker.pending} never seen"
        lines.append(f"  delete -> visible to DuckDB p99 <= {VISIBLE_P99:.0f} s: {p99:.2f} s over "
                     f"{len(with_d.visible)} batches{unseen} -> "
                     f"{verdict(p99 <= VISIBLE_P99 and seen)}")
    else:
        lines.append("  delete -> visible to DuckDB: no batch seen deleted -> NOT met")
    if with_d.insert_lat and without.insert_lat:
        a, b = lat.percentile(with_d.insert_lat, 99), lat.percentile(without.insert_lat, 99)
        lines.append(f"  insert -> durable p99 with deletes within {INSERT_P99_RATIO - 1:.0%} of without: {a:.2f} s "
                     f"against {b:.2f} s, ratio {a / b:.2f} -> {verdict(a <= INSERT_P99_RATIO * b)}")
    lines.append(f"  correctness: DuckDB count(*) {check.counted:,} = {check.inserted:,} inserted - {check.deleted:,} "
                 f"distinct keys deleted ({check.inserted - check.deleted:,}); deleted keys still returned: "
                 f"{check.left} -> {verdict(check.ok)}")
    return lines


_CYCLE_LINE = re.compile(r"deltanode\.pipeline\.cycle: cycle (\d+): ")


def cycle_lines(log_file: str, numbers: set[int]) -> dict[int, str]:
    """The DataNode's log lines of the cycles ``numbers``."""
    out = {}
    with open(log_file, errors="replace") as f:
        for line in f:
            m = _CYCLE_LINE.search(line)
            if m and int(m.group(1)) in numbers:
                out[int(m.group(1))] = line.rstrip()
    return out


def _sample_cycles(f: Figures) -> dict[int, str]:
    """A phase's median and slowest cycles (by duration), labelled."""
    ranked = sorted(f.cycles, key=lambda c: c["seconds"])
    if not ranked:
        return {}
    return {ranked[len(ranked) // 2]["number"]: "median", ranked[-1]["number"]: "slowest"}


def render(run: DeleteRun, argv: list[str], a, load0: str) -> str:
    m = machine_info()
    commits = lat.commits_from_log(run.uri)
    figs = [figures(run, p, commits) for p in run.phases]
    b, af, comp = run.files_before, run.files_after, run.compaction
    out = [
        "DeltaNode delete benchmark",
        f"command : build/bench.sh {shlex.join(argv)}".rstrip(),
        f"machine : nproc {m['nproc']}, {m['cpu']}, {m['memory']} RAM, load average at start {load0}",
        (f"workload: {run.files_before.rows:,} rows x ({DIM}-dim FloatVector, Int64 pk, VarChar) in {SHARDS} shards, "
         f"a TimeTick every 200 ms per pchannel; inserts of {ROWS_PER_MESSAGE:,} rows "
         f"({run.insert_size / 1e6:.2f} MB) at {a.deletes_insert_mb_s:g} MB/s; deletes of {a.delete_rate:g} random "
         f"committed keys/s in batches of {a.delete_batch} (one DeleteRequest per shard, partition -1)"),
        (f"DataNode: Spark local[2], trigger {a.trigger_ms} ms, cycle cap {a.max_messages_per_batch} records and "
         f"{a.max_bytes_per_batch} bytes, {a.splits} tasks; compactor timer off (one round after the backlog)"),
        (f"backlog : {mb(run.backlog_bytes)} MB committed in {run.backlog_s:.1f} s (flowgraph start -> last commit); "
         f"{b.count} files (largest {mb(b.largest)} MB) -> one compaction round ({comp.get('rewrites', 0)} segment "
         f"rewrites, {comp.get('files_in', 0)} files -> {comp.get('files_out', 0)}, {comp.get('seconds', 0):.1f} s) "
         f"-> {af.count} files (largest {mb(af.largest)} MB) for the phases; rows quarantined in the whole run: "
         f"{sum(e['quarantined'] for e in run.node.events if e['ev'] == 'cycle')}"),
        "",
        ("Phases side by side, same DataNode and collection, phase 'with deletes' first; DuckDB "
         f"(delta_scan, 1 thread) polls every {POLL_INTERVAL * 1000:.0f} ms in both. Latencies from produce(); "
         "a batch is visible at the end of the first query that found none of its keys"),
        table(["", *(f.phase.label for f in figs)], phase_rows(figs, a)),
        "",
        "Targets",
        *targets(figs, run.check),
        "",
        ("Cycle log lines (the DataNode's INFO log; median and slowest cycle of each phase's load; its 'commits' "
         "is the whole sync, the mark job included)"),
    ]
    for f in figs:
        picked = _sample_cycles(f)
        lines = cycle_lines(run.node.log_file, set(picked))
        out += [f"  {f.phase.label}, {what}: {lines[number]}" for number, what in picked.items() if number in lines]
    return "\n".join(out)


def main(bench: Bench, argv: list[str], load0: str) -> str:
    """Run the delete benchmark with ``bench``'s broker and work dir; its report."""
    deletes = DeleteBench(bench)
    run = deletes.run()
    return render(run, argv, bench.args, load0)
