"""The DataNode's shared pipeline: one loop, one Spark job per cycle, whatever the number of vchannels.

The loop runs a cycle every ``trigger.interval`` (at once while a backlog remains; further apart
while its cycles write more binlog files a second than ``trigger.files_rate``: ``trigger``), made
of stages with one job each:

- ``registry``: the vchannels this node runs (channel watchers add and remove them between cycles);
- ``cycle``: plan the cycle's offset ranges, read, route and write them in one Spark job, apply
  each vchannel's portions to its flowgraph;
- ``sync_manager``: pick the collections to commit, fence them, mark the rows their deletes
  remove, commit each collection's vchannels in one Delta commit;
- ``failures``: a vchannel that fails drops what it did not commit and is loaded again from
  Delta after a backoff (``loader``), alone; the cycle goes on for the others. A broker that does
  not answer fails none: they wait where they stand, and ``broker_reachability`` reports it; a full
  filesystem and an object store that does not answer are told once for the node
  (``space_watch``, ``storage_full``; ``store_reachability``);
- the ``compactor`` rewrites small binlog files on its own thread.

Data never passes through the driver: it sees offsets, file lists and counts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pyspark import SparkContext

from ..config.sections.pipeline import PipelineSettings
from ..delta.layout import StorageLayout
from ..delta.object_store import is_object_store
from ..failure.classify import Failure, classify
from ..failure.kinds import FailureKind
from ..jobs.contract import JobGroup
from ..jobs.launch import SparkStopped, cancel
from ..milvus_import.importer import MilvusSource, VchannelImporter
from ..mq.broker import Broker
from ..mq.reachability import BrokerReachability
from ..state.channel_state import SegmentState
from ..state.commit import discard
from ..vchannel.flowgraph import FlowgraphStatus, Snapshot, VchannelFlowgraph
from ..wire.datapb import VchannelInfo
from ..wire.milvus_proto import schema_pb2
from ..wire.positions import CODECS
from .compaction_rounds import CompactionTarget, Compactor
from .cycle import CycleRunner
from .cycle_report import CycleReport
from .loader import VchannelLoader
from .registry import VchannelRegistry
from .space_watch import SpaceWatch
from .sync_manager import SyncManager
from .trigger import Trigger
from .turns import CycleObserver, CycleTurns
from .vchannel_stops import Fence, VchannelStops, store_outage

log = logging.getLogger(__name__)
MAX_LOOP_BACKOFF = 60.0


class Pipeline:
    """Runs on the driver. ``add``/``remove``/``snapshots`` may be called from any thread."""

    def __init__(self, sc: SparkContext, storage: StorageLayout, broker: Broker,
                 settings: PipelineSettings = PipelineSettings(), *, node_id: int = 0,
                 fence: Fence | None = None, on_cycle: CycleObserver | None = None,
                 milvus: MilvusSource | None = None) -> None:
        """``milvus``: mirror mode's Milvus, whose persisted segments a vchannel handed over with
        them is imported from (``milvus_import``)."""
        self.sc, self.storage, self.broker, self.settings = sc, storage, broker, settings
        self.node_id = node_id
        self.registry = VchannelRegistry()
        self.broker_reachability = BrokerReachability(broker.address)
        self._syncs = SyncManager(sc=sc, storage=storage, settings=settings.sync, fence=fence, fail=self._fail,
                                  new_collection_files=settings.compaction.min_files, max_tasks=settings.limits.splits)
        self._loader = VchannelLoader(syncs=self._syncs,
                                      importer=VchannelImporter(sc, storage, milvus) if milvus else None)
        self._space = SpaceWatch()
        self.store_reachability = store_outage(storage.root)
        self._failures = VchannelStops(storage=storage, fence=fence, load=self._loader.load,
                                       forget_topic=self._loader.forget, space=self._space,
                                       store=self.store_reachability)
        self._stopping = threading.Event()
        self._wake = threading.Event()               # set by add and stop: the next cycle starts at once
        self._flushes: dict[int, int] = {}           # collection id -> the latest flush ts requested
        self._flush_lock = threading.Lock()
        self._cycle = CycleRunner(sc=sc, storage=storage, broker=broker, limits=settings.limits, seal=settings.seal,
                                  registry=self.registry, failures=self._failures, flushes=self._requested_flushes,
                                  stopping=self._stopping, reachability=self.broker_reachability)
        self._thread: threading.Thread | None = None
        self.spark_stopped = False                   # the loop ended because Spark stopped under it
        self._turns = CycleTurns(registry=self.registry, runner=self._cycle, syncs=self._syncs, stopping=self._stopping,
                                 on_cycle=on_cycle)
        self._trigger = Trigger(settings.trigger)
        self.cycles = self._turns.reports
        self.compactor = Compactor(sc=sc, storage=storage, members=self, settings=settings.compaction)

    def request_flush(self, collection_id: int, flush_ts: int) -> None:
        """Flush the collection's vchannels on this node at ``flush_ts`` (seal_policy.py); each
        takes it at the start of a cycle, once: a request it took before is ignored. Any thread."""
        with self._flush_lock:
            if flush_ts > self._flushes.get(collection_id, 0):
                self._flushes[collection_id] = flush_ts
        self._wake.set()

    def _requested_flushes(self) -> dict[int, int]:
        with self._flush_lock:
            return dict(self._flushes)

    # -- membership ------------------------------------------------------------------------
    def add(self, info: VchannelInfo, schema: schema_pb2.CollectionSchema,
            progressed: Callable[[], None] = lambda: None) -> None:
        """Start reading ``info.channelName`` from Delta's state (else the VchannelInfo's); returns
        once the vchannel takes part in the next cycle. Raises when its state cannot be loaded.
        ``progressed``: called as a long load (an import from Milvus) gets further."""
        fg = VchannelFlowgraph(info, schema, self.node_id, CODECS[self.broker.kind])
        self._loader.load(fg, progressed)
        self.registry.add(fg)
        self._wake.set()
        log.info("%s: flowgraph starts at offset %d (ts %d), %d segments known, replay filter %s", fg.vchannel,
                 fg.next_offset, fg.working.checkpoint_ts, len(fg.working.segments),
                 "active" if fg.working.replay else "idle")

    def remove(self, vchannel: str, timeout: float = 60.0) -> None:
        """Stop reading ``vchannel``: what it did not commit is dropped. Returns once no cycle uses it."""
        fg = self.registry.remove(vchannel, timeout)
        if fg is not None:
            self._loader.forget(fg.pchannel)   # watched again: ask the broker, not the cache
            discard(self.storage, fg.collection_id, fg.batches.uncommitted_files())
            log.info("%s: flowgraph released", vchannel)

    def vchannels(self) -> list[str]:
        return self.registry.vchannels()

    def snapshots(self) -> list[Snapshot]:
        return self.registry.snapshots()

    @property
    def storage_full(self) -> str | None:
        """``storage full: {where}: {reason}`` while a full filesystem keeps vchannels from
        committing (``space_watch``), else None. Any thread."""
        return self._space.condition

    @property
    def storage_full_since(self) -> float | None:
        """The wall clock the ``storage_full`` condition began at (None: no condition)."""
        return self._space.since

    def high_watermark(self, pchannel: str, partition: int = 0) -> int | None:
        """The pchannel's high watermark as the last cycle saw it (None before one did)."""
        return self._cycle.highs_seen.get((pchannel, partition))

    # -- compaction (``Compactor`` asks, from its own thread) ---------------------------------------
    def collection_ids(self) -> list[int]:
        """The collections of the vchannels on this node."""
        return self.registry.collection_ids()

    def compaction_targets(self, min_new_files: int) -> list[CompactionTarget]:
        """Collections into which ``min_new_files`` insert files or more were committed since they
        were last returned, with the live segments of their running vchannels."""
        committers = self._syncs.take_due(min_new_files)
        members = [fg for fg in self.registry.members().values()
                   if fg.collection_id in committers and fg.status == FlowgraphStatus.RUNNING]
        # After a field is added a collection's flowgraphs may write with different schemas until
        # planning aligns them: the outputs take the newest one's columns, so a rewrite drops none.
        newest: dict[int, VchannelFlowgraph] = {}
        for fg in members:
            known = newest.get(fg.collection_id)
            if known is None or fg.schema_rank > known.schema_rank:
                newest[fg.collection_id] = fg
        targets: dict[int, CompactionTarget] = {}
        for fg in members:
            state = fg.batches.state   # the compactor's thread: not ``working``, which moves it (``Batches``)
            if state is None or state.collection_dropped:
                continue
            target = targets.get(fg.collection_id)
            if target is None:
                latest = newest[fg.collection_id]
                target = targets[fg.collection_id] = CompactionTarget(fg.collection_id, committers[fg.collection_id],
                                                                      latest.layout.insert_schema(),
                                                                      latest.layout.primary_key.name, {},
                                                                      latest.table_schema)
            dropped_partitions = set(state.dropped_partitions)
            target.segments.update((seg.segment_id, fg.vchannel) for seg in state.segments.values()
                                   if seg.state != SegmentState.DROPPED and seg.partition_id not in dropped_partitions)
        return [t for t in targets.values() if t.segments]

    def compactable(self, vchannel: str, segment_id: int) -> int | None:
        fg = self.registry.get(vchannel)
        if fg is None or fg.status != FlowgraphStatus.RUNNING:
            return None
        state = fg.batches.state   # not ``working``, as in ``compaction_targets``
        if state is None or state.collection_dropped:
            return None
        seg = state.segments.get(segment_id)
        if seg is None or seg.state == SegmentState.DROPPED or seg.partition_id in state.dropped_partitions:
            return None
        return self._loader.committer(fg).own_txn(vchannel)

    # -- the loop --------------------------------------------------------------------------
    def start(self) -> Pipeline:
        watermarks = self.broker.watermarks()
        self._cycle.watermarks = self._loader.watermarks = watermarks
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
                cancel(self.sc, JobGroup.PIPELINE)
                self._thread.join(timeout)
        self._cycle.close()
        for fg in self.registry.members().values():
            discard(self.storage, fg.collection_id, fg.batches.uncommitted_files())
        if self._cycle.watermarks is not None:
            self._cycle.watermarks.close()
            self._cycle.watermarks = self._loader.watermarks = None

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            report: CycleReport | None = None
            try:
                report = self._turns.turn()
                failures = 0
            except SparkStopped as e:
                log.warning("Spark stopped under cycle %d (%s): the pipeline stops; what it did not commit is "
                            "read again at the next start", self._turns.number, e)
                self.spark_stopped = True
                self._turns.abandon()
                self._stopping.set()
                break
            except Exception as e:  # a bug must not end persistence for good
                failures += 1
                log.exception("cycle failed (%d in a row); every vchannel restarts from Delta", failures)
                now = time.monotonic()
                why = classify(e, kind=FailureKind.CYCLE_FAILED, where=self.storage.root, step="running a cycle",
                               store=is_object_store(self.storage.root))
                for fg in self.registry.members().values():
                    self._fail(fg, why, now)
                self._turns.abandon()
                self._stopping.wait(min(MAX_LOOP_BACKOFF, 2.0 ** failures))
            finally:
                self.registry.end_cycle()
            self._space.check(self.registry.get)
            if report is not None and report.commits:   # the store answered this cycle's commits
                self.store_reachability.answered()
            self._wake.wait(max(0.0, self._trigger.next_start(started, time.monotonic(), report) - time.monotonic()))
            self._wake.clear()
        self._turns.close()

    def _fail(self, fg: VchannelFlowgraph, failure: Failure, now: float, report: CycleReport | None = None,
              at_once: bool = False, keep_files: bool = False) -> None:
        self._failures.fail(fg, failure, now, report, at_once, keep_files)
