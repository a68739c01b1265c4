"""A DataNode: an etcd session, the MEP 7 channel watch, and the shared pipeline of its vchannels.

The etcd client's background thread keeps the session lease alive and delivers channel
watch events and flush requests (``flush_watch``); the pipeline's thread runs the cycles; the
main thread only polls. A DataNode never calls the coordinator: it persists on its own, fenced
by its session and its watch keys.

etcd away does not stop it: the vchannels it owns keep committing (each commit is a
compare-and-swap on the vchannel's Delta ``txn``, see ``storage.commit``), and the outage is
reported (``Reachability``). When etcd answers that the session is gone (its lease expired
meanwhile), the coordinator is already reassigning its channels: the node releases them,
registers a new session and watches what it is given under the new server ID. Milvus's
DataNode exits instead (TriggerKill); no DeltaNode process exits because etcd was away.
"""

from __future__ import annotations

import logging
import threading
import time

from pyspark import SparkContext

from ..config.settings import Settings
from ..datanode.channel_watch import ChannelWatcher
from ..delta.layout import StorageLayout
from ..etcd.client import EtcdClient, EtcdError
from ..etcd.fence import OwnershipFence
from ..etcd.reachability import Reachability
from ..etcd.session import Session, SessionError
from ..milvus_import.importer import MilvusSource
from ..mq.broker import Broker
from ..pipeline.pipeline import Pipeline
from ..wire.positions import CODECS
from .channel_handler import FlowgraphManager
from .flush_watch import FlushWatcher
from .metrics import MetricsServer, NodeView
from .status import FAILING_SHOWN, NodeStatus, process_name, remove_status, write_status

log = logging.getLogger(__name__)


REJOIN_BACKOFF = (1.0, 2.0, 5.0, 10.0)   # seconds between attempts to register a new session


class DataNode:
    def __init__(self, settings: Settings, sc: SparkContext) -> None:
        self.settings = settings
        self.sc = sc
        self.reachability = Reachability(settings.etcd.endpoints)
        self.client: EtcdClient | None = None
        self.session: Session | None = None
        self.watcher: ChannelWatcher | None = None
        self.flushes: FlushWatcher | None = None
        self.pipeline: Pipeline | None = None
        self.flowgraphs: FlowgraphManager | None = None
        self.fence: OwnershipFence | None = None
        self.metrics: MetricsServer | None = None
        self.sessions_lost = 0
        self.registered = False               # holds a live session (False from a loss until it registers again)
        self._lost: list[str] = []            # reasons, appended by etcd threads
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._rejoiner: threading.Thread | None = None
        self._own_clients: list[EtcdClient] = []   # etcd clients of other clusters (a mirrored Milvus's)

    @property
    def node_id(self) -> int:
        return self.session.server_id if self.session else 0

    def start(self) -> "DataNode":
        settings = self.settings
        self.client = EtcdClient(settings.etcd.endpoints, security=settings.etcd.security)
        self.fence = OwnershipFence(settings.etcd.endpoints, settings.etcd.root, 0, reachability=self.reachability,
                                    security=settings.etcd.security)
        if settings.node.metrics_port:
            self.metrics = MetricsServer(self.view(), settings.node.metrics_address, settings.node.metrics_port).start()
        self.pipeline = Pipeline(self.sc, StorageLayout.of(settings.storage), Broker.of(settings.broker),
                                 settings.pipeline, fence=self.fence,
                                 on_cycle=self.metrics.on_cycle if self.metrics else None, milvus=self._milvus())
        self.flowgraphs = FlowgraphManager(self.pipeline)
        self.pipeline.start()
        self._register()
        self.flushes = FlushWatcher(self.client, settings.etcd.root, self.pipeline).start()
        self.publish([])
        self._rejoiner = threading.Thread(target=self._rejoin_loop, name="datanode-rejoin", daemon=True)
        self._rejoiner.start()
        return self

    def _milvus(self) -> MilvusSource | None:
        """Mirror mode: the Milvus whose persisted segments vchannels are imported from."""
        mirror = self.settings.mirror
        if mirror.meta_root is None:
            return None
        assert self.client is not None
        client = EtcdClient(mirror.etcd_endpoints, security=mirror.etcd_security) if mirror.etcd_endpoints \
            else self.client
        if client is not self.client:
            self._own_clients.append(client)
        storage = None if mirror.storage is None else StorageLayout.of(mirror.storage)
        return MilvusSource(client=client, meta_root=mirror.meta_root, storage=storage,
                            positions=CODECS[self.settings.broker.kind], batch=mirror.import_batch)

    def view(self) -> NodeView:
        """This node as the metrics read it (each figure evaluated when scraped)."""
        return NodeView(node_id=lambda: self.node_id if self.registered else 0,
                        snapshots=lambda: self.pipeline.snapshots() if self.pipeline else [],
                        high_watermark=lambda p: self.pipeline.high_watermark(p) if self.pipeline else None,
                        pipeline_alive=lambda: self.pipeline is not None and self.pipeline.alive,
                        etcd_down_since=lambda: self.reachability.down_since,
                        etcd_error=lambda: self.reachability.error,
                        sessions_lost=lambda: self.sessions_lost,
                        storage_full=lambda: self.pipeline.storage_full if self.pipeline else None,
                        broker_down_since=lambda: self.pipeline.broker_reachability.down_since
                        if self.pipeline else None,
                        broker_error=lambda: self.pipeline.broker_reachability.error if self.pipeline else "",
                        store_down_since=lambda: self.pipeline.store_reachability.down_since
                        if self.pipeline else None,
                        store_error=lambda: self.pipeline.store_reachability.error if self.pipeline else "")

    def _register(self) -> None:
        """Take a session (a new server ID) and follow the channel watch keys of that ID."""
        # set by start() before it registers (the rejoin thread registers after it)
        assert self.client is not None and self.fence is not None
        assert self.pipeline is not None and self.flowgraphs is not None
        root = self.settings.etcd.root
        session = Session(self.client, root, "datanode", self.settings.node.address,
                          ttl=max(1, int(self.settings.etcd.session_ttl)), on_lost=self._on_lost,
                          reachability=self.reachability)
        self.session = session
        self.fence.node_id = self.pipeline.node_id = session.server_id
        self.watcher = ChannelWatcher(self.client, root, session.server_id, self.flowgraphs,
                                      workers=self.settings.node.watch_workers).start()
        self.registered = True
        log.info("DataNode %d up: watching %s/channelwatch/%d/", session.server_id, root, session.server_id)

    def _on_lost(self, reason: str) -> None:
        """Runs on an etcd thread: only records (the rejoin thread does the work)."""
        self._lost.append(reason)
        self._wake.set()

    def _rejoin_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stopping.is_set() or not self._lost:
                continue
            reason = self._lost[-1]   # the latest; earlier ones are the same loss
            self._lost.clear()
            self._rejoin(reason)

    def _rejoin(self, reason: str) -> None:
        old = self.node_id
        self.registered = False
        self.sessions_lost += 1
        log.error("DataNode %d lost its etcd session (%s): the coordinator is reassigning its channels; "
                  "releasing them and registering a new session", old, reason)
        # a lost session is one that start() registered, with everything else
        assert self.watcher is not None and self.session is not None
        assert self.pipeline is not None and self.flowgraphs is not None
        self.watcher.stop(timeout=10)
        for vchannel in self.pipeline.vchannels():
            self.flowgraphs.release(vchannel)
        self.session.close()
        attempt = 0
        while not self._stopping.is_set():
            try:
                self._register()
                log.warning("DataNode %d registered again as DataNode %d", old, self.node_id)
                return
            except (EtcdError, SessionError) as exc:
                delay = REJOIN_BACKOFF[min(attempt, len(REJOIN_BACKOFF) - 1)]
                attempt += 1
                log.warning("registering a new session failed (%s); again in %.0f s", exc, delay)
                self._stopping.wait(delay)

    def poll(self) -> bool:
        """Run from the main loop: False once Spark stopped under the pipeline (spark-submit's JVM
        is exiting: the node stops). Raises RuntimeError if the pipeline's thread ended otherwise
        (it catches every cycle's errors, so only a bug gets here)."""
        assert self.pipeline is not None, "poll() after start()"
        if self.pipeline.alive:
            return True
        if self.pipeline.spark_stopped:
            return False
        raise RuntimeError(f"DataNode {self.node_id}: its pipeline loop stopped")

    def progress(self) -> list[dict]:
        return self.flowgraphs.progress() if self.flowgraphs else []

    def alerts(self) -> list[str]:
        """Node-level conditions for the progress reports (an etcd outage, a full filesystem)."""
        outage = self.reachability.describe()
        alerts = [f"{outage}; committing on Delta's txn check alone"] if outage else []
        full = self.pipeline.storage_full if self.pipeline else None
        if full:
            alerts.append(f"{full}: the vchannels that write there wait for space")
        broker = self.pipeline.broker_reachability.describe() if self.pipeline else None
        if broker:
            alerts.append(f"{broker}; the vchannels wait where they stand")
        store = self.pipeline.store_reachability.describe() if self.pipeline else None
        if store:
            alerts.append(f"{store}; the vchannels that write there wait for it")
        return alerts

    def publish(self, rows: list[dict]) -> None:
        """Write this node's status document for ``admin health`` (``rows``: ``progress()``)."""
        assert self.pipeline is not None, "publish() after start()"
        failing = {r["vchannel"]: r["last_error"] for r in rows if r["status"] == "failed"}
        status = NodeStatus(process_name(), self.node_id, time.time(), self.settings.node.progress_interval,
                            len(rows), sum(r["status"] != "failed" for r in rows),
                            dict(sorted(failing.items())[:FAILING_SHOWN]), self.reachability.down_since,
                            self.reachability.error or None, self.sessions_lost,
                            storage_full=self.pipeline.storage_full,
                            storage_full_since=self.pipeline.storage_full_since,
                            broker_unreachable_since=self.pipeline.broker_reachability.down_since,
                            broker_error=self.pipeline.broker_reachability.error or None)
        try:
            write_status(self.pipeline.storage, status)
        except OSError as exc:
            log.warning("could not write the status document for admin health: %s", exc)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._rejoiner is not None:
            self._rejoiner.join(timeout=15)
        if self.watcher is not None:
            self.watcher.stop(timeout=10)
        if self.flushes is not None:
            self.flushes.stop()
        if self.pipeline is not None:
            self.pipeline.stop()
            try:
                remove_status(self.pipeline.storage, process_name())
            except OSError as exc:
                log.warning("could not remove the status document: %s", exc)
        if self.session is not None:
            self.session.close()
        if self.fence is not None:
            self.fence.close()
        for client in self._own_clients:
            client.close()
        if self.client is not None:
            self.client.close()
        if self.metrics is not None:
            self.metrics.stop()
