"""The DataNode's shared pipeline: one loop, one Spark job per cycle, whatever the number of vchannels.

A cycle (every ``trigger_interval``, or at once while a backlog remains):

1. plan (driver): the high watermark of every pchannel with a vchannel on this node, then
   the cycle's offset ranges (``plan``): each pchannel once for the vchannels near its head,
   once more for those catching up, within the byte and message caps;
2. read, route and write (executors): one Spark job of at most ``splits`` tasks; a task reads
   its ranges once and writes each vchannel's binlogs (``task``);
3. advance (driver): each vchannel's portions move its working state (``flowgraph``);
4. sync (driver): the sync policies pick collections; one fence check for all of them; one
   Delta commit per collection, with a ``txn`` per vchannel (``storage.commit``).

Data never passes through the driver: it sees offsets, file lists and counts. A vchannel that
fails (its range cannot be read, its router raised, its commit was refused, its fence failed)
drops what it did not commit and is started again from Delta after a backoff, alone; the
cycle goes on for the others. Vchannels join and leave between cycles (``add``/``remove``),
without restarting anything.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import SparkSession

from ..faults import crash_point
from ..flowgraph.results import Portion, ReadStats
from ..flowgraph.seal_policy import SealSettings
from ..flowgraph.state_update import BatchRangeError, advance, retract_after_drops
from ..flowgraph.vchannel import FAILED, RUNNING, Snapshot, VchannelFlowgraph
from ..mq.broker import Broker, BrokerError, HighWatermarks
from ..storage import meta
from ..storage.channel_state import DROPPED as SEGMENT_DROPPED
from ..storage.channel_state import SEALED
from ..storage.commit import CollectionCommitter, discard
from ..storage.compaction import CompactionSettings
from ..storage.layout import StorageLayout
from ..wire.datapb import VchannelInfo
from ..wire.milvus_proto import schema_pb2
from ..wire.positions import CODECS
from .compactor import CompactionTarget, Compactor
from .cycle_report import CycleReport
from .jobs import JOB_GROUP
from .plan import MAX_MESSAGE_BYTES, Limits, Position, plan_cycle, split_tasks
from .sync_manager import COMMIT_REFUSED, Fence, SyncManager
from .sync_policy import SyncSettings
from .task import TaskOutput, TaskSpec, run_task

log = logging.getLogger(__name__)
CYCLES_KEPT = 100
MAX_LOOP_BACKOFF = 60.0
TOPIC_ID_TTL = 10.0   # seconds a pchannel's topic id is reused for loads


@dataclass(frozen=True)
class PipelineSettings:
    limits: Limits = Limits()
    sync: SyncSettings = SyncSettings()
    trigger_interval: float = 1.0
    compaction: CompactionSettings = CompactionSettings()
    seal: SealSettings = SealSettings()


CycleObserver = Callable[[CycleReport], None]


class Pipeline:
    """Runs on the driver. ``add``/``remove``/``snapshots`` may be called from any thread."""

    def __init__(self, spark: SparkSession, storage: StorageLayout, broker: Broker,
                 settings: PipelineSettings = PipelineSettings(), *, node_id: int = 0,
                 fence: Fence | None = None, on_cycle: CycleObserver | None = None) -> None:
        self.spark, self.storage, self.broker, self.settings = spark, storage, broker, settings
        self.node_id, self.fence, self.on_cycle = node_id, fence, on_cycle
        self._members: dict[str, VchannelFlowgraph] = {}
        self._syncs = SyncManager(spark, storage, settings.sync, fence, self._fail, settings.compaction.min_files,
                                  settings.limits.splits)
        self._lock = threading.Lock()
        self._busy: set[str] = set()                 # vchannels of the running cycle
        self._idle = threading.Condition(self._lock)
        self._averages: dict[str, float] = {}        # pchannel -> bytes per DML message
        self._watermarks: HighWatermarks | None = None
        self._stopping = threading.Event()
        self._wake = threading.Event()               # set by add and stop: the next cycle starts at once
        self._thread: threading.Thread | None = None
        self._highs_seen: dict[tuple[str, int], int] = {}
        self._topic_ids: dict[str, tuple[str, float]] = {}   # pchannel -> (its topic id, monotonic time asked)
        self.cycles: deque[CycleReport] = deque(maxlen=CYCLES_KEPT)
        self._cycles = 0
        self.compactor = Compactor(spark, storage, self, settings.compaction)
        self._flushes: dict[int, int] = {}          # collection id -> the latest flush ts requested

    def request_flush(self, collection_id: int, flush_ts: int) -> None:
        """Flush the collection's vchannels on this node at ``flush_ts`` (seal_policy.py); each
        takes it at the start of a cycle, once: a request it took before is ignored. Any thread."""
        with self._lock:
            if flush_ts > self._flushes.get(collection_id, 0):
                self._flushes[collection_id] = flush_ts
        self._wake.set()

    # -- membership ------------------------------------------------------------------------
    def add(self, info: VchannelInfo, schema: schema_pb2.CollectionSchema) -> None:
        """Start reading ``info.channelName`` from Delta's state (else the VchannelInfo's); returns
        once the vchannel takes part in the next cycle. Raises when its state cannot be loaded."""
        fg = VchannelFlowgraph(info, schema, self.node_id, CODECS[self.broker.kind])
        self._load(fg)
        with self._lock:
            self._members[fg.vchannel] = fg
        self._wake.set()
        log.info("%s: flowgraph starts at offset %d (ts %d), %d segments known, replay filter %s", fg.vchannel,
                 fg.next_offset, fg.working.checkpoint_ts, len(fg.working.segments),
                 "active" if fg.working.replay else "idle")

    def remove(self, vchannel: str, timeout: float = 60.0) -> None:
        """Stop reading ``vchannel``: what it did not commit is dropped. Returns once no cycle uses it."""
        with self._idle:
            fg = self._members.pop(vchannel, None)
            if not self._idle.wait_for(lambda: vchannel not in self._busy, timeout):
                log.warning("%s: still in a cycle after %.0f s; removed anyway", vchannel, timeout)
        if fg is not None:
            self._topic_ids.pop(fg.pchannel, None)   # watched again: ask the broker, not the cache
            discard(self.storage, fg.collection_id, fg.uncommitted_files())
            log.info("%s: flowgraph released", vchannel)

    def vchannels(self) -> list[str]:
        with self._lock:
            return sorted(self._members)

    def snapshots(self) -> list[Snapshot]:
        with self._lock:
            members = list(self._members.values())
        return sorted((fg.snapshot() for fg in members), key=lambda s: s.vchannel)

    def high_watermark(self, pchannel: str, partition: int = 0) -> int | None:
        """The pchannel's high watermark as the last cycle saw it (None before one did)."""
        return self._highs_seen.get((pchannel, partition))

    def _committer(self, fg: VchannelFlowgraph) -> CollectionCommitter:
        return self._syncs.committer(fg.collection_id, fg.layout.insert_schema(), fg.layout.delete_schema())

    # -- compaction (``Compactor`` asks, from its own thread) ---------------------------------------
    def collection_ids(self) -> list[int]:
        """The collections of the vchannels on this node."""
        with self._lock:
            return sorted({fg.collection_id for fg in self._members.values()})

    def compaction_targets(self, min_new_files: int) -> list[CompactionTarget]:
        """Collections into which ``min_new_files`` insert files or more were committed since they
        were last returned, with the live segments of their running vchannels."""
        committers = self._syncs.take_due(min_new_files)
        with self._lock:
            members = [fg for fg in self._members.values() if fg.collection_id in committers and fg.status == RUNNING]
        targets: dict[int, CompactionTarget] = {}
        for fg in members:
            state = fg.working
            if state is None or state.collection_dropped:
                continue
            target = targets.get(fg.collection_id)
            if target is None:
                target = targets[fg.collection_id] = CompactionTarget(fg.collection_id, committers[fg.collection_id],
                                                                      fg.layout.insert_schema(),
                                                                      fg.layout.primary_key.name, {})
            dropped_partitions = set(state.dropped_partitions)
            target.segments.update((seg.segment_id, fg.vchannel) for seg in state.segments.values()
                                   if seg.state != SEGMENT_DROPPED and seg.partition_id not in dropped_partitions)
        return [t for t in targets.values() if t.segments]

    def compactable(self, vchannel: str, segment_id: int) -> int | None:
        with self._lock:
            fg = self._members.get(vchannel)
        if fg is None or fg.status != RUNNING or fg.working is None or fg.working.collection_dropped:
            return None
        seg = fg.working.segments.get(segment_id)
        if seg is None or seg.state == SEGMENT_DROPPED or seg.partition_id in fg.working.dropped_partitions:
            return None
        return self._committer(fg).own_txn(vchannel)

    def _load(self, fg: VchannelFlowgraph) -> None:
        committer = self._committer(fg)
        with committer.lock:
            insert_log = committer.insert_log()
            committed = meta.channel_state_in(insert_log, fg.vchannel) if insert_log is not None else None
            watermarks = committer.watermarks(fg.vchannel)
        fg.load(committed, watermarks, time.monotonic(), self._topic_id(fg.pchannel))

    def _topic_id(self, pchannel: str) -> str:
        """The broker's id of the pchannel topic ("" when it gives none or cannot answer now: the
        check is skipped, the reads will tell), asked at most every TOPIC_ID_TTL seconds (a start
        loads every vchannel of a pchannel in a burst) unless a vchannel of the pchannel failed or
        left since."""
        known = self._topic_ids.get(pchannel)
        if known is not None and time.monotonic() - known[1] < TOPIC_ID_TTL:
            return known[0]
        client = self._watermarks
        if client is None:
            return ""
        try:
            topic_id = client.topic_id(pchannel)
        except BrokerError as e:
            log.warning("%s: cannot check the topic's id (%s); loading without the check", pchannel, e)
            return ""
        self._topic_ids[pchannel] = (topic_id, time.monotonic())
        return topic_id

    # -- the loop --------------------------------------------------------------------------
    def start(self) -> Pipeline:
        self._watermarks = self.broker.watermarks()
        self._thread = threading.Thread(target=self._run, name="deltanode-pipeline", daemon=True)
        self._thread.start()
        self.compactor.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 60.0) -> None:
        """Finish the running cycle (its commits included), then stop; uncommitted batches are dropped."""
        self._stopping.set()
        self._wake.set()
        self.compactor.stop(timeout)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.spark.sparkContext.cancelJobGroup(JOB_GROUP)
                self._thread.join(timeout)
        for fg in list(self._members.values()):
            discard(self.storage, fg.collection_id, fg.uncommitted_files())
        if self._watermarks is not None:
            self._watermarks.close()
            self._watermarks = None

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                capped = self._cycle()
                failures = 0
            except Exception as e:  # noqa: BLE001 - a bug must not end persistence for good
                failures += 1
                log.exception("cycle failed (%d in a row); every vchannel restarts from Delta", failures)
                now = time.monotonic()
                with self._lock:
                    members = list(self._members.values())
                for fg in members:
                    self._fail(fg, f"pipeline cycle failed: {type(e).__name__}: {e}", now)
                capped = False
                self._stopping.wait(min(MAX_LOOP_BACKOFF, 2.0 ** failures))
            finally:
                with self._idle:
                    self._busy = set()
                    self._idle.notify_all()
            if not capped:
                self._wake.wait(max(0.0, started + self.settings.trigger_interval - time.monotonic()))
            self._wake.clear()

    def _cycle(self) -> bool:
        """One cycle; True when a backlog remains (the next cycle starts at once)."""
        self._cycles += 1
        report = CycleReport(self._cycles, started=time.time())
        now = time.monotonic()
        with self._lock:
            members = dict(self._members)
            self._busy = set(members)
        self._reload_failed(members, now, report)
        readable = [fg for fg in members.values() if fg.readable]
        self._seal(readable)
        highs = self._highs(readable, report, now)
        readable = [fg for fg in readable if fg.readable]
        averages = self._message_sizes(readable)
        plan = plan_cycle([Position(fg.vchannel, fg.pchannel, fg.working.partition, fg.next_offset,
                                    fg.working.replay is not None or fg.working.seek_ts > 0
                                    or fg.working.flush_ts > 0, fg.min_range)
                               for fg in readable],
                          highs, averages, self.settings.limits)
        for vchannel, why in plan.lost.items():
            self._fail(members[vchannel], f"BrokerError: {why}", now, report)
        tasks = split_tasks(plan.ranges, averages, self.settings.limits.splits, self.broker.cut_points)
        report.plan_s = time.monotonic() - now
        if tasks:
            report.ranges, report.tasks = len(plan.ranges), len(tasks)
            contexts = {fg.vchannel: fg.context() for fg in readable}
            schemas = {fg.collection_id: fg.schema_bytes for fg in readable}
            specs = []
            for pieces in tasks:
                names = {v for p in pieces for v in p.members}
                specs.append(TaskSpec(self._cycles, tuple(pieces), {v: contexts[v] for v in names},
                                      {members[v].collection_id: schemas[members[v].collection_id] for v in names},
                                      self.storage, self.broker))
            job_started = time.monotonic()
            outputs = self._run_tasks(specs, members, report)
            report.job_s = time.monotonic() - job_started
            crash_point("after_binlog_write")
            apply_started = time.monotonic()
            self._apply(outputs, members, apply_started, report)
            report.apply_s = time.monotonic() - apply_started
        sync_started = time.monotonic()
        with self._lock:
            current = {v: fg for v, fg in self._members.items() if members.get(v) is fg}
        self._syncs.sync(current, sync_started, report)
        report.sync_s = time.monotonic() - sync_started
        crash_point("after_commit")
        report.seconds = time.monotonic() - now
        self.cycles.append(report)
        self._log(report)
        if self.on_cycle is not None:
            try:
                self.on_cycle(report)
            except Exception:  # noqa: BLE001 - an observer (metrics) never stops persistence
                log.exception("cycle %d: its observer failed", report.number)
        return plan.capped

    def _reload_failed(self, members: dict[str, VchannelFlowgraph], now: float, report: CycleReport) -> None:
        for fg in members.values():
            if fg.status == FAILED and now >= fg.retry_at:
                if fg.last_error.startswith(COMMIT_REFUSED) and self.fence is not None and not self.fence.reachable:
                    # Another node committed this vchannel, and etcd cannot say whose it is now:
                    # restarting would only take turns with that node, each refusing the other.
                    continue
                try:
                    self._load(fg)
                    fg.claim = fg.last_error.startswith(COMMIT_REFUSED)   # etcd said it is ours (above)
                    log.info("%s: flowgraph restarted from Delta at offset %d", fg.vchannel, fg.next_offset)
                except Exception as e:  # noqa: BLE001 - retried after the next backoff
                    self._fail(fg, f"restart failed: {type(e).__name__}: {e}", now, report)

    def _highs(self, readable: list[VchannelFlowgraph], report: CycleReport,
               now: float) -> dict[tuple[str, int], int]:
        highs: dict[tuple[str, int], int] = {}
        errors: dict[tuple[str, int], str] = {}
        for key, high in self._watermarks.highs(sorted({(fg.pchannel, fg.working.partition) for fg in readable})).items():
            if isinstance(high, BrokerError):
                errors[key] = str(high)
            else:
                highs[key] = self._highs_seen[key] = high
        for fg in readable:
            error = errors.get((fg.pchannel, fg.working.partition))
            if error is not None:
                self._fail(fg, f"BrokerError: {error}", now, report)
        return highs

    def _run_tasks(self, specs: list[TaskSpec], members: dict[str, VchannelFlowgraph],
                   report: CycleReport) -> list[TaskOutput]:
        """The cycle's Spark job. If it fails, each task runs as a job of its own, so a range that
        breaks its task (a worker crash) fails only its own vchannels."""
        sc = self.spark.sparkContext
        sc.setJobGroup(JOB_GROUP, f"deltanode cycle {self._cycles}: {len(specs)} task(s)", interruptOnCancel=True)
        try:
            return sc.parallelize(specs, len(specs)).map(run_task).collect()
        except Exception as e:  # noqa: BLE001 - isolated below
            if self._stopping.is_set():
                raise
            log.warning("cycle %d: its Spark job failed (%s); running its tasks one by one", self._cycles,
                        str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__)
        outputs = []
        for spec in specs:
            try:
                outputs += sc.parallelize([spec], 1).map(run_task).collect()
            except Exception as e:  # noqa: BLE001 - this task's vchannels fail, alone
                why = f"SparkTaskFailed: {summarize_error(str(e))}"
                for v in {v for p in spec.pieces for v in p.members}:
                    if v in members:
                        self._fail(members[v], why, time.monotonic(), report)
        return outputs

    def _apply(self, outputs: list[TaskOutput], members: dict[str, VchannelFlowgraph], now: float,
               report: CycleReport) -> None:
        by_vchannel: dict[str, list[Portion]] = {}
        read_sizes: dict[str, list[int]] = {}   # pchannel -> [bytes, messages] of this job's reads
        for out in outputs:
            report.task_s += out.seconds
            report.task_cpu_s += out.cpu_seconds
            for read in out.reads:
                self._learn(read, report)
                total = read_sizes.setdefault(read.pchannel, [0, 0])
                total[0] += read.dml_bytes if read.dml_messages else read.bytes
                total[1] += read.dml_messages or read.messages
            for p in out.portions:
                by_vchannel.setdefault(p.vchannel, []).append(p)
        with self._lock:
            current = dict(self._members)
        for vchannel, portions in by_vchannel.items():
            fg = members[vchannel]
            files = [f for p in portions for f in p.files]
            if current.get(vchannel) is not fg or fg.status != RUNNING:
                discard(self.storage, fg.collection_id, files)   # released (or failed) meanwhile
                continue
            errors = [p.error for p in portions if p.error]
            if errors:
                discard(self.storage, fg.collection_id, files)
                self._fail(fg, errors[0], now, report)
                continue
            tickless = sum(p.tickless for p in portions)
            if tickless:
                fg.read_without_tick(tickless)
                continue
            portions, retracted = retract_after_drops(portions)
            discard(self.storage, fg.collection_id, retracted)
            try:
                outcome = advance(fg.working, portions)
            except BatchRangeError as e:
                discard(self.storage, fg.collection_id, [f for p in portions for f in p.files])
                self._fail(fg, f"BatchRangeError: {e}", now, report)
                continue
            nbytes, messages = read_sizes.get(fg.pchannel, (0, 0))
            fg.apply(outcome, now, nbytes / messages if messages else None)
            report.rows += outcome.inserted_rows
            report.deletes += outcome.deleted_rows
            report.quarantined += outcome.quarantined
        for read in (r for out in outputs for r in out.reads if r.next_position is not None and r.error is None):
            for fg in members.values():
                if fg.pchannel == read.pchannel and fg.status == RUNNING and fg.next_offset == read.end:
                    fg.skip_gap(read.next_position)

    def _seal(self, readable: list[VchannelFlowgraph]) -> None:
        """Flush requests and seal policies, before the cycle reads (its batches seal the segments
        first seen up to a flush ts, and flush what a tick reaches: state_update.advance)."""
        with self._lock:
            flushes = dict(self._flushes)
        for fg in readable:
            flush_ts = flushes.get(fg.collection_id)
            if flush_ts and fg.request_flush(flush_ts):
                log.info("%s: flush at ts %d: segments %s sealed at %d", fg.vchannel, flush_ts,
                         sorted(s.segment_id for s in fg.working.segments.values() if s.state == SEALED),
                         fg.working.flush_ts)
            due = fg.seal_due(self.settings.seal)
            if due:
                log.info("%s: segments %s sealed (%s)", fg.vchannel, due,
                         ", ".join(sorted({fg.working.segments[s].seal_reason for s in due})))

    def _learn(self, read: ReadStats, report: CycleReport) -> None:
        """Per pchannel: bytes per DML message as reads see them, at once up, a tenth per read down."""
        report.messages += read.messages
        report.bytes += read.bytes
        if read.dml_messages:
            seen = read.dml_bytes / read.dml_messages
            self._averages[read.pchannel] = max(seen, 0.9 * self._averages.get(read.pchannel, 0.0))

    def _message_sizes(self, readable: list[VchannelFlowgraph]) -> dict[str, float]:
        """The size each pchannel's messages are counted at when planning: never below the size of
        any vchannel on it, and the largest Milvus message while one has never been read (a
        pchannel's recent reads may have seen only another vchannel's small inserts while one
        just added has a backlog of large ones behind them)."""
        sizes = dict(self._averages)
        for fg in readable:
            own = fg.message_size() or MAX_MESSAGE_BYTES
            sizes[fg.pchannel] = max(sizes.get(fg.pchannel, 0.0), own)
        return {p: size for p, size in sizes.items() if size}

    def _fail(self, fg: VchannelFlowgraph, why: str, now: float, report: CycleReport | None = None,
              at_once: bool = False, keep_files: bool = False) -> None:
        files = fg.fail(why, now)
        if not keep_files:
            discard(self.storage, fg.collection_id, files)
        self._topic_ids.pop(fg.pchannel, None)   # its reload asks the broker, not the cache
        if at_once:
            fg.retry_at = now
        if why.startswith(COMMIT_REFUSED) and self.fence is not None and not self.fence.reachable:
            then = "not restarted until etcd can say which node owns it"
        else:
            then = f"restarting from Delta in {fg.retry_at - now:.0f} s"
        log.error("%s: flowgraph failed (%d in a row), %s: %s", fg.vchannel, fg.failures, then, why)
        if report is not None:
            report.failed.append(fg.vchannel)

    @staticmethod
    def _log(r: CycleReport) -> None:
        if not (r.rows or r.deletes or r.quarantined or r.commits or r.failed):
            log.debug("cycle %d: %d messages in %d range(s), nothing to commit, %.3f s", r.number, r.messages,
                      r.ranges, r.seconds)
            return
        log.info("cycle %d: %d range(s) in %d task(s), %d messages, %.1f MB: %d rows, %d deletes, %d quarantined; "
                 "%d commit(s) for %d vchannel(s)%s; %.3f s (plan %.3f, job %.3f, apply %.3f, commits %.3f; tasks %.3f s, "
                 "their CPU %.3f s)",
                 r.number, r.ranges, r.tasks, r.messages, r.bytes / 1e6, r.rows, r.deletes, r.quarantined, r.commits,
                 r.vchannels_committed, f", {len(r.failed)} failed" if r.failed else "", r.seconds, r.plan_s, r.job_s,
                 r.apply_s, r.sync_s, r.task_s, r.task_cpu_s)


_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", re.MULTILINE)
_JVM_PREFIXES = ("org.", "java.", "scala.", "py4j.", "pyspark.errors")


def summarize_error(text: str) -> str:
    """The Python exception behind a failed Spark job, not the JVM stack around it."""
    found = [m for m in _PY_ERROR.finditer(text) if not m.group(1).startswith(_JVM_PREFIXES)]
    line = f"{found[-1].group(1)}: {found[-1].group(2)}" if found else (text.strip().splitlines() or ["?"])[0]
    return line[:500]
