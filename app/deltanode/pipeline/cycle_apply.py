"""Applying a cycle's job output on the driver (``CycleRunner.finish``): each vchannel's portions
move its working state (``flowgraph.state_update``), idle reads move it by ticks or park it, and
what a vchannel no longer owns is discarded. A vchannel whose range the broker did not serve
(``FailureKind.BROKER_UNREACHABLE``: a retry) waits where it stands: its portions' files are deleted and
a later cycle reads the range again. A portion that ends before a schema change of its collection
(a field added to the live collection: ``Portion.schema``) has every flowgraph of the collection
on this node take the new schema, with which the next cycle reads on."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..delta.layout import StorageLayout
from ..failure.classify import Failure
from ..failure.kinds import Action, FailureKind
from ..mq.reachability import BrokerReachability
from ..records import Portion, RangeKey, ReadStats, SchemaChange, TaskOutput
from ..state.commit import discard
from ..vchannel.flowgraph import FlowgraphStatus, VchannelFlowgraph
from ..vchannel.state_update import BatchRangeError, advance, cut_after_short, retract_after_drops
from ..wire.milvus_proto import schema_pb2
from .cycle_report import CycleReport
from .parking import CursorKey, Parking
from .plan import Plan
from .registry import VchannelRegistry
from .vchannel_stops import VchannelStops

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Launched:
    """A cycle between ``start`` and ``finish``: its plan, and its Spark job when it has one."""

    plan: Plan
    job: Future[tuple[list[TaskOutput], list[tuple[str, Failure]]]] | None = None
    started: float = 0.0                                  # monotonic time the job was submitted
    loads: dict[str, int] = field(default_factory=dict)   # vchannel -> its flowgraph's loads when planned
    starts: dict[str, int] = field(default_factory=dict)  # vchannel -> its next offset when planned
    members: dict[RangeKey, tuple[str, ...]] = field(default_factory=dict)   # range -> its vchannels not parked
    grouped: dict[RangeKey, CursorKey] = field(default_factory=dict)         # range -> the cursor it reads for
    parked: dict[CursorKey, tuple[str, ...]] = field(default_factory=dict)   # cursor -> its members when planned


class CycleApplier:
    """Runs on the driver, in the pipeline's loop (``CycleRunner.finish``); learns the bytes per
    DML message of each pchannel from the reads it applies (``averages``, which the runner plans by)."""

    def __init__(self, *, storage: StorageLayout, registry: VchannelRegistry, failures: VchannelStops,
                 parking: Parking, reachability: BrokerReachability) -> None:
        self.storage, self.registry, self.failures, self.parking = storage, registry, failures, parking
        self.reachability = reachability
        self.averages: dict[str, float] = {}                  # pchannel -> bytes per DML message

    def apply(self, outputs: list[TaskOutput], members: dict[str, VchannelFlowgraph], launched: Launched,
              now: float, report: CycleReport) -> None:
        """The job's outputs move the vchannels' states: the tasks' portions, and the reads of the
        vchannels they have no portion for (the idle ones); then the vchannels a read left at a gap
        skip it."""
        by_vchannel = _account(outputs, report)
        reads = [read for out in outputs for read in out.reads]
        sizes = self._read_sizes(reads, report)
        unparked = self.parking.settle(reads, launched.grouped, launched.parked, sizes)
        idle = _idle_reads(reads, launched, unparked)
        applying = _Applying(members=members, current=self.registry.members(), launched=launched, sizes=sizes,
                             now=now, report=report)
        self._apply_idle(idle, by_vchannel, applying)
        for vchannel, portions in by_vchannel.items():
            self._apply_portions(members[vchannel], portions, applying)
        _skip_gaps(reads, members)

    def _read_sizes(self, reads: list[ReadStats], report: CycleReport) -> dict[str, float | None]:
        """Learns from each of the job's reads (``_learn``); returns, by pchannel, the bytes per
        message of its reads (by DML message when they had any)."""
        totals: dict[str, list[int]] = {}   # pchannel -> [bytes, messages]
        for read in reads:
            self._learn(read, report)
            total = totals.setdefault(read.pchannel, [0, 0])
            total[0] += read.dml_bytes if read.dml_messages else read.bytes
            total[1] += read.dml_messages or read.messages
        return {pchannel: nbytes / messages if messages else None for pchannel, (nbytes, messages) in totals.items()}

    def _apply_idle(self, idle: dict[str, list[ReadStats]], by_vchannel: dict[str, list[Portion]],
                    applying: _Applying) -> None:
        """A vchannel idle in its one read of the cycle moves by ticks alone, without a portion
        (``VchannelFlowgraph.read_ticks``), and parks if it may; the others take the general path
        (``_apply_portions``) with a portion made of each of their reads."""
        starts = applying.launched.starts
        for vchannel, reads in idle.items():
            fg, read = applying.members[vchannel], reads[0]
            if len(reads) == 1 and read.error is None and vchannel not in by_vchannel and applying.live(fg):
                first = max(read.first, starts[vchannel])
                if fg.read_ticks(first, read.end, read.tick_from(first), applying.now, applying.sizes[read.pchannel]):
                    self.parking.park(fg)
                    continue
            by_vchannel.setdefault(vchannel, []).extend(r.idle_portion(vchannel, starts[vchannel]) for r in reads)

    def _apply_portions(self, fg: VchannelFlowgraph, portions: list[Portion], applying: _Applying) -> None:
        """``fg``'s portions move its state, unless it is no longer live (``_Applying.live``), the
        broker did not serve one of them (it waits where it stands), a task failed it or they do
        not continue its position (it fails): their files are deleted then. Portions without a
        tick to end at do nothing but ask for a longer range."""
        if not applying.live(fg):
            discard(self.storage, fg.collection_id, [f for p in portions for f in p.files])
            return
        error = next((p.error for p in portions if p.error is not None), None)
        if error is not None and error.action is Action.RETRY:
            discard(self.storage, fg.collection_id, [f for p in portions for f in p.files])
            self.reachability.failed(error.message)
            return
        if error is not None:
            discard(self.storage, fg.collection_id, [f for p in portions for f in p.files])
            self.failures.fail(fg, error, applying.now, applying.report)
            return
        tickless = sum(p.tickless for p in portions)
        if tickless:
            discard(self.storage, fg.collection_id, [f for p in portions for f in p.files])
            fg.read_without_tick(tickless)
            return
        portions, unread = cut_after_short(portions)
        portions, retracted = retract_after_drops(portions)
        discard(self.storage, fg.collection_id, [f for p in unread for f in p.files] + retracted)
        try:
            outcome = advance(fg.working, portions)
        except BatchRangeError as e:
            discard(self.storage, fg.collection_id, [f for p in portions for f in p.files])
            self.failures.fail(fg, Failure(kind=FailureKind.BATCH_RANGE, message=str(e)), applying.now,
                               applying.report)
            return
        fg.apply(outcome, applying.now, applying.sizes.get(fg.pchannel))
        change = next((p.schema for p in portions if p.schema is not None), None)
        if change is not None:
            _take_schema(fg, change, applying.current)
        report = applying.report
        report.rows += outcome.inserted_rows
        report.files += sum(len(p.files) for p in portions)
        report.deletes += outcome.deleted_rows
        report.quarantined += outcome.quarantined

    def _learn(self, read: ReadStats, report: CycleReport) -> None:
        """Per pchannel: bytes per DML message as reads see them, at once up, a tenth per read down."""
        report.messages += read.messages
        report.bytes += read.bytes
        if read.dml_messages:
            seen = read.dml_bytes / read.dml_messages
            self.averages[read.pchannel] = max(seen, 0.9 * self.averages.get(read.pchannel, 0.0))


@dataclass(frozen=True, kw_only=True)
class _Applying:
    """What applying a cycle's job output goes by."""

    members: dict[str, VchannelFlowgraph]   # the cycle's
    current: dict[str, VchannelFlowgraph]   # the registry's when the output is applied
    launched: Launched
    sizes: dict[str, float | None]          # pchannel -> bytes per message of the job's reads
    now: float
    report: CycleReport

    def live(self, fg: VchannelFlowgraph) -> bool:
        """Whether ``fg`` still runs as planned: not released, failed or loaded again meanwhile (a
        sync runs beside the job); else what the job did for it is dropped."""
        return (self.current.get(fg.vchannel) is fg and fg.status == FlowgraphStatus.RUNNING
                and fg.loads == self.launched.loads[fg.vchannel])


def _take_schema(fg: VchannelFlowgraph, change: SchemaChange, current: dict[str, VchannelFlowgraph]) -> None:
    """``fg`` read a schema change of its collection that adds columns: every flowgraph of the
    collection on this node writes with it from the next cycle on (its commits widen the table)."""
    schema = schema_pb2.CollectionSchema.FromString(change.schema)
    before = {f.name for f in fg.layout.fields}
    took = sorted(other.vchannel for other in current.values()
                  if other.collection_id == fg.collection_id and other.take_schema(schema))
    if took:
        added = [f.name for f in fg.layout.fields if f.name not in before]
        log.info("collection %d: schema version %d read on %s at ts %d adds %s: taken by %s", fg.collection_id,
                 change.version, fg.vchannel, change.ts, added or "no column here", ", ".join(took))


def _account(outputs: list[TaskOutput], report: CycleReport) -> dict[str, list[Portion]]:
    """The tasks' times into ``report``; their portions by vchannel."""
    by_vchannel: dict[str, list[Portion]] = {}
    for out in outputs:
        report.task_s += out.seconds
        report.task_cpu_s += out.cpu_seconds
        report.task_read_s += out.read_wait_seconds
        for p in out.portions:
            by_vchannel.setdefault(p.vchannel, []).append(p)
    return by_vchannel


def _idle_reads(reads: list[ReadStats], launched: Launched,
                unparked: dict[CursorKey, list[str]]) -> dict[str, list[ReadStats]]:
    """By vchannel, the reads it saw no message of its own in (``records.ReadStats``): of the
    vchannels each read was planned for, and of the parked ones that take the general path for
    it (``unparked``: ``Parking.settle``'s)."""
    idle: dict[str, list[ReadStats]] = {}
    starts = launched.starts
    for read in reads:
        routed, end = read.routed, read.end
        names = launched.members[read.key]
        cursor = launched.grouped.get(read.key)
        if cursor is not None and cursor in unparked:
            names += tuple(unparked[cursor])
        for v in names:
            if v not in routed and starts[v] < end:
                seen = idle.get(v)
                if seen is None:
                    idle[v] = [read]
                else:
                    seen.append(read)
    return idle


def _skip_gaps(reads: list[ReadStats], members: dict[str, VchannelFlowgraph]) -> None:
    """A read that ended at a gap (the pchannel has no message from its end to its
    ``next_position``): the running vchannels that stand at its end skip the gap."""
    for read in reads:
        position = read.next_position
        if read.error is not None or position is None:
            continue
        for fg in members.values():
            if fg.pchannel == read.pchannel and fg.status == FlowgraphStatus.RUNNING and fg.next_offset == read.end:
                fg.skip_gap(position)
