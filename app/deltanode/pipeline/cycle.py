"""One cycle of the shared pipeline (driver): plan, one Spark job, apply.

1. plan: the high watermark of every pchannel with a vchannel on this node, then the cycle's
   offset ranges (``plan``): each pchannel once for the vchannels near its head, once more for
   those catching up, within the byte and message caps; flush requests and seal policies first;
2. read, route and write (executors): one Spark job of at most ``splits`` tasks; a task reads
   its ranges once and writes each vchannel's binlogs (``executor.task``);
3. apply: each vchannel's portions move its working state (``cycle_apply``, ``flowgraph.state_update``).

A broker that does not answer (``BrokerUnreachable``: down, starting again, paused, cut off) fails
no vchannel: a partition whose high watermark it did not give is not read this cycle, and a range
it did not serve is read again by a later one (its files are deleted); their vchannels wait where
they stand, what they read before stays pending and is committed, and they read on once it
answers, without a restart or a backoff (unless it answers the partition's watermark through a few
cycles in a row of unserved reads: ``read_stalls``). The outage is reported once (``mq.reachability``); a
job that runs long has the broker asked meanwhile (``PROBE_AFTER``), since its reads tell of a
broker gone under them only at their stall timeout.

The job runs on a thread of its own (``start`` plans and submits it, ``finish`` waits and
applies), so the sync step (``sync_manager``) of the batches the previous cycle applied can run
beside it (``pipeline.Pipeline``). Data never passes through the driver: it sees offsets, file
lists and counts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace

from pyspark import SparkContext

from ..config.sections.pipeline import Limits, SealSettings
from ..delta.layout import StorageLayout
from ..executor.task import run_task
from ..failure.classify import Failure, classify
from ..failure.crash_points import crash_point
from ..failure.kinds import FailureKind
from ..jobs.contract import JobGroup, JobKind
from ..jobs.launch import launch_isolated, local_dir, summarize_error
from ..mq.broker import Broker, BrokerError, BrokerUnreachable, HighWatermarks
from ..mq.reachability import BrokerReachability
from ..records import RouteContexts, TaskOutput, TaskSpec
from ..state.channel_state import SegmentState
from ..vchannel.flowgraph import VchannelFlowgraph, align_schemas
from .cycle_apply import CycleApplier, Launched
from .cycle_budget import MIN_MESSAGES, CycleBudget, CycleCost
from .cycle_report import CycleReport
from .parking import CursorKey, Parking
from .plan import Plan, Position, plan_cycle, planning_sizes, split_tasks
from .read_stalls import StalledReads
from .registry import VchannelRegistry
from .vchannel_stops import VchannelStops
from .watermark_probe import Answers, ask_highs

log = logging.getLogger(__name__)
# Seconds into a cycle's job after which, and between which, the loop asks the broker for one
# watermark of the job's pchannels while it waits (``CycleRunner.finish``), at most ``PROBE_TIMEOUT``.
PROBE_AFTER = 5.0
PROBE_TIMEOUT = 5.0
# The cycle's job: a task's ranges read once, each vchannel's binlogs written (``executor.task``).
CYCLE = JobKind(name="deltanode cycle", run=run_task, group=JobGroup.PIPELINE)


class CycleRunner:
    """Runs on the driver, in the pipeline's loop; keeps what cycles learn of the pchannels."""

    def __init__(self, *, sc: SparkContext, storage: StorageLayout, broker: Broker,
                 limits: Limits, seal: SealSettings,
                 registry: VchannelRegistry, failures: VchannelStops,
                 flushes: Callable[[], dict[int, int]], stopping: threading.Event,
                 reachability: BrokerReachability | None = None) -> None:
        """Where it reads and writes (``sc``, ``storage``, ``broker``); its settings sections
        (``limits``, ``seal``); the stages it works with (``registry``, ``failures``); what it
        asks of its pipeline: ``flushes``, collection id -> the latest flush ts requested, and
        ``stopping``, set when the pipeline stops (a failed job is then not retried task by task);
        and where it reports whether the broker answers (``reachability``; its own when not given)."""
        self.sc, self.storage, self.broker, self.limits, self.seal = sc, storage, broker, limits, seal
        self.registry, self.failures, self.flushes, self.stopping = registry, failures, flushes, stopping
        self.reachability = reachability if reachability is not None else BrokerReachability(broker.address)
        self.watermarks: HighWatermarks | None = None         # the broker's metadata client, once started
        self.number = 0
        self.highs_seen: dict[tuple[str, int], int] = {}
        self._jobs = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltanode-cycle-job")
        self.parking = Parking()
        self.applier = CycleApplier(storage=storage, registry=registry, failures=failures, parking=self.parking,
                                    reachability=self.reachability)
        self.budget = CycleBudget(max_seconds=limits.cycle_seconds, floor=MIN_MESSAGES * limits.splits)
        self.stalled_reads = StalledReads()

    def start(self, members: dict[str, VchannelFlowgraph], report: CycleReport, now: float) -> Launched:
        """Plan for ``members`` (failed ones reloaded first, when due) and start the cycle's Spark
        job on the job thread; ``finish`` waits for it and applies its output."""
        self.number = report.number
        self.failures.reload_due(members, now, report)
        flushes = self.flushes()
        self.parking.prepare(members, flushes)
        readable = [fg for fg in members.values() if fg.readable and not fg.parked]
        self._seal(readable, flushes)
        highs = self._highs(readable, report, now)
        readable = [fg for fg in readable if fg.readable and (fg.pchannel, fg.working.partition) in highs] \
            + self.parking.unpark_past(highs)
        averages = self._message_sizes(readable)
        positions = [_position(fg) for fg in readable]
        cap = self.budget.messages()
        limits = self.limits if cap is None else replace(self.limits, cycle_messages=cap)
        cursors = [p for p in self.parking.positions() if (p.pchannel, p.partition) in highs]
        plan = plan_cycle(positions + cursors, highs, averages, limits)
        for vchannel, why in plan.lost.items():
            self.failures.fail(members[vchannel], Failure(kind=FailureKind.BROKER, message=why), now, report)
        ranges, spans = self.parking.expand(plan.ranges)
        tasks = split_tasks(ranges, averages, self.limits.splits, self.broker.cut_points)
        report.plan_s = time.monotonic() - now
        if not tasks:
            return Launched(plan=plan)
        report.ranges, report.tasks = len(plan.ranges), len(tasks)
        rows = {fg.vchannel: fg.route_row() for fg in readable}
        schemas = align_schemas(readable + self.parking.flowgraphs(spans))
        loads = {fg.vchannel: fg.loads for fg in readable}
        starts = {p.vchannel: p.next_offset for p in positions}
        self.parking.rows(spans, rows, schemas, starts, loads)
        specs = []
        for pieces in tasks:
            names = sorted({v for p in pieces for v in p.members})
            specs.append(TaskSpec(self.number, tuple(pieces), RouteContexts.from_rows([rows[v] for v in names]),
                                  {members[v].collection_id: schemas[members[v].collection_id] for v in names},
                                  self.storage, self.broker))
        own, grouped = self.parking.pieces([p for pieces in tasks for p in pieces], spans)
        return Launched(plan=plan, job=self._jobs.submit(self._run_tasks, specs), started=time.monotonic(),
                        loads=loads, starts=starts, members=own, grouped=grouped,
                        parked={key: self.parking.members(key) for key in spans})

    def finish(self, launched: Launched, members: dict[str, VchannelFlowgraph], report: CycleReport) -> Plan:
        """Wait for the cycle's job; each vchannel's portions move its state, unless it failed,
        left or was loaded again meanwhile (a sync runs beside the job)."""
        if launched.job is None:
            return launched.plan
        outputs, failed = self._wait(launched)
        report.job_s = time.monotonic() - launched.started
        crash_point("after_binlog_write")
        apply_started = time.monotonic()
        for vchannel, why in failed:
            if vchannel in members:
                self.failures.fail(members[vchannel], why, apply_started, report)
        self.applier.apply(outputs, members, launched, apply_started, report)
        report.apply_s = time.monotonic() - apply_started
        self.budget.observe(CycleCost(messages=report.messages, job_seconds=report.job_s))
        return launched.plan

    def close(self) -> None:
        self._jobs.shutdown(wait=False)

    def _wait(self, launched: Launched) -> tuple[list[TaskOutput], list[tuple[str, Failure]]]:
        """The job's result, its reads the broker left unserved while answering judged
        (``read_stalls``: they fail their vchannels after a few cycles in a row).

        Every ``PROBE_AFTER`` seconds it runs, the broker is asked for the watermark of one of its
        pchannels and given at most ``PROBE_TIMEOUT`` to answer, on a thread of its own (Pulsar's
        client waits out its 10-s operation timeout, then probes the broker), the job's end ending
        the wait at once: one that does not answer in time is reported at once, where the job's
        reads would tell only at their stall timeout (its answer reports nothing: the job's end or
        the next cycle's watermarks do). A question still unanswered is not asked again."""
        assert launched.job is not None
        probe = sorted({(r.pchannel, r.partition) for r in launched.plan.ranges})[:1]
        asking: Future[Answers] | None = None
        while not launched.job.done():
            if wait([launched.job], timeout=PROBE_AFTER).done:
                break
            if not probe or self.watermarks is None or self.stopping.is_set():
                continue
            if asking is None or asking.done():
                asking = ask_highs(self.watermarks, probe, PROBE_TIMEOUT)
            either: list[Future] = [launched.job, asking]
            done = wait(either, timeout=PROBE_TIMEOUT, return_when=FIRST_COMPLETED).done
            if asking in done:
                answer = asking.result().get(probe[0])
                if isinstance(answer, BrokerUnreachable):
                    self.reachability.failed(str(answer))
            elif launched.job not in done:
                self.reachability.failed(f"no answer within {PROBE_TIMEOUT:.0f} s to the watermark request of "
                                         f"{probe[0][0]}[{probe[0][1]}] from {self.broker.address}")
        outputs, failed = launched.job.result()
        return self.stalled_reads.judge(outputs, None if self.stopping.is_set() else self.watermarks), failed

    def _highs(self, readable: list[VchannelFlowgraph], report: CycleReport,
               now: float) -> dict[tuple[str, int], int]:
        """The high watermark of each partition the cycle may read. One the broker did not answer for
        is left out: its vchannels, parked or not, wait where they stand. One it answered with an
        error (a topic it lost) fails its vchannels."""
        highs: dict[tuple[str, int], int] = {}
        errors: dict[tuple[str, int], str] = {}
        unanswered: list[str] = []
        wanted = sorted({(fg.pchannel, fg.working.partition) for fg in readable} | self.parking.keys())
        if not wanted:
            return highs
        assert self.watermarks is not None   # set by Pipeline.start, before its first cycle
        for key, high in self.watermarks.highs(wanted).items():
            if isinstance(high, BrokerUnreachable):
                unanswered.append(str(high))
            elif isinstance(high, BrokerError):
                errors[key] = str(high)
            else:
                highs[key] = self.highs_seen[key] = high
        if unanswered:
            self.reachability.failed(unanswered[0])
        else:
            self.reachability.answered()
        if errors:
            for fg in readable + [fg for key in errors for fg in self.parking.unpark_all(CursorKey(*key))]:
                error = errors.get((fg.pchannel, fg.working.partition))
                if error is not None:
                    self.failures.fail(fg, Failure(kind=FailureKind.BROKER, message=error), now, report)
        return highs

    def _run_tasks(self, specs: list[TaskSpec]) -> tuple[list[TaskOutput], list[tuple[str, Failure]]]:
        """The cycle's Spark job (on the job thread, which unpickles its outputs): its outputs, and
        the vchannels of tasks that failed; each task's alone (``launch_isolated``), unless Spark
        itself stopped (``SparkStopped``: no vchannel failed)."""
        ran = launch_isolated(self.sc, CYCLE, specs, description=f"cycle {specs[0].cycle}: {len(specs)} task(s)",
                              stopping=self.stopping.is_set)
        failed = [(v, self._task_failure(e)) for spec, e in ran.failed
                  for v in sorted({v for p in spec.pieces for v in p.members})]
        return ran.results, failed

    def _task_failure(self, e: Exception) -> Failure:
        """Why a task's vchannels fail when its Spark job failed: a full filesystem there is
        Spark's local directory (the tasks' own writes to the storage root fail in the task, as
        the vchannel's own failure, not the job's)."""
        return classify(e, kind=FailureKind.TASK, where=f"Spark's local directory {local_dir(self.sc)}",
                        step="running the cycle's Spark job", message=summarize_error(str(e)))

    def _seal(self, readable: list[VchannelFlowgraph], flushes: dict[int, int]) -> None:
        """Flush requests and seal policies, before the cycle reads (its batches seal the segments
        first seen up to a flush ts, and flush what a tick reaches: state_update.advance)."""
        for fg in readable:
            flush_ts = flushes.get(fg.collection_id)
            if flush_ts and fg.request_flush(flush_ts):
                log.info("%s: flush at ts %d: segments %s sealed at %d", fg.vchannel, flush_ts,
                         sorted(s.segment_id for s in fg.working.segments.values() if s.state == SegmentState.SEALED),
                         fg.working.flush_ts)
            due = fg.seal_due(self.seal)
            if due:
                log.info("%s: segments %s sealed (%s)", fg.vchannel, due,
                         ", ".join(sorted({fg.working.segments[s].seal_reason for s in due})))

    def _message_sizes(self, readable: list[VchannelFlowgraph]) -> dict[str, float]:
        """The size each pchannel's messages are counted at when planning (``plan.planning_sizes``)."""
        return planning_sizes(self.applier.averages, [(fg.pchannel, fg.batches.message_size()) for fg in readable]
                              + self.parking.sizes())


def _position(fg: VchannelFlowgraph) -> Position:
    """Where ``fg`` reads from this cycle, for the plan. A vchannel that asked for a longer range (no
    point to end at in its last one) reads it in one piece: split, its first piece would be as short."""
    w = fg.working
    min_range = fg.batches.min_range
    return Position(fg.vchannel, fg.pchannel, w.partition, w.checkpoint_offset,
                    w.replay is not None or w.seek_ts > 0 or w.flush_ts > 0 or min_range > 0, min_range)


def log_cycle(r: CycleReport) -> None:
    """One INFO line per cycle that did something (DEBUG for the others)."""
    if not (r.rows or r.deletes or r.quarantined or r.commits or r.failed):
        log.debug("cycle %d: %d messages in %d range(s), nothing to commit, %.3f s", r.number, r.messages,
                  r.ranges, r.seconds)
        return
    log.info("cycle %d: %d range(s) in %d task(s), %d messages, %.1f MB: %d rows, %d deletes, %d quarantined in %d "
             "file(s); %d commit(s) for %d vchannel(s)%s; %.3f s (plan %.3f, job %.3f, apply %.3f, commits %.3f; "
             "tasks %.3f s, their CPU %.3f s, broker wait %.3f s)",
             r.number, r.ranges, r.tasks, r.messages, r.bytes / 1e6, r.rows, r.deletes, r.quarantined, r.files,
             r.commits, r.vchannels_committed, f", {len(r.failed)} failed" if r.failed else "", r.seconds, r.plan_s,
             r.job_s, r.apply_s, r.sync_s, r.task_s, r.task_cpu_s, r.task_read_s)
