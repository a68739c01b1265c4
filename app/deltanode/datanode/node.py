"""A DataNode: an etcd session, the MEP 7 channel watch, and the shared pipeline of its vchannels.

The etcd client's background thread keeps the session lease alive and delivers channel
watch events; the pipeline's thread runs the cycles; the main thread only polls. A DataNode
never calls the coordinator: it persists on its own, fenced by its session and its watch keys.
"""

from __future__ import annotations

import logging
import threading

from pyspark.sql import SparkSession

from ..config import Conf
from ..datanode.channel_watch import ChannelWatcher
from ..etcd.client import EtcdClient
from ..etcd.fence import OwnershipFence
from ..etcd.session import Session
from ..mq.broker import Broker
from ..pipeline.pipeline import Pipeline, PipelineSettings
from ..pipeline.plan import Limits
from ..pipeline.sync_policy import SyncSettings
from ..storage.layout import StorageLayout
from .flowgraphs import FlowgraphManager

log = logging.getLogger(__name__)


def pipeline_settings(conf: Conf) -> PipelineSettings:
    return PipelineSettings(
        Limits(max_messages=conf.get("datanode.batch.max.messages"), max_bytes=conf.get("datanode.batch.max.bytes"),
               catchup_bytes=conf.get("datanode.catchup.max.bytes"), splits=conf.get("datanode.read.splits")),
        SyncSettings(max_delay=conf.get("datanode.sync.max.delay"),
                     checkpoint_interval=conf.get("datanode.checkpoint.interval"),
                     idle_rate=conf.get("datanode.checkpoint.max.rate")),
        trigger_interval=conf.get("datanode.trigger.interval"))


def broker_of(conf: Conf) -> Broker:
    return Broker(conf.get("mq.type"), conf.get("mq.kafka.bootstrap.servers"))


class SessionLost(RuntimeError):
    """The etcd session expired: another node may already own this node's channels."""


class DataNode:
    def __init__(self, conf: Conf, spark: SparkSession) -> None:
        self.conf = conf
        self.spark = spark
        self.lost = threading.Event()
        self.lost_reason = ""
        self.client: EtcdClient | None = None
        self.session: Session | None = None
        self.watcher: ChannelWatcher | None = None
        self.pipeline: Pipeline | None = None
        self.flowgraphs: FlowgraphManager | None = None

    @property
    def node_id(self) -> int:
        return self.session.server_id if self.session else 0

    def start(self) -> "DataNode":
        conf = self.conf
        root = conf.get("etcd.root")
        self.client = EtcdClient(conf.get("etcd.endpoints"))
        self.session = Session(self.client, root, "datanode", conf.get("datanode.address"),
                               ttl=max(1, int(conf.get("session.ttl"))), on_lost=self._on_lost)
        self.pipeline = Pipeline(self.spark, StorageLayout(str(conf.get("storage.root"))), broker_of(conf),
                                 pipeline_settings(conf), node_id=self.session.server_id,
                                 fence=OwnershipFence(conf.get("etcd.endpoints"), root, self.session.server_id)).start()
        self.flowgraphs = FlowgraphManager(self.pipeline)
        self.watcher = ChannelWatcher(self.client, root, self.session.server_id, self.flowgraphs).start()
        log.info("DataNode %d up: watching %s/channelwatch/%d/", self.node_id, root, self.node_id)
        return self

    def _on_lost(self, reason: str) -> None:
        self.lost_reason = reason
        self.lost.set()

    def poll(self) -> None:
        """Run from the main loop; raises SessionLost once the session is gone, RuntimeError if the
        pipeline's thread ended (it catches every cycle's errors, so only a bug gets here)."""
        if self.lost.is_set():
            raise SessionLost(f"DataNode {self.node_id} lost its etcd session ({self.lost_reason}); "
                              f"its channels are being reassigned")
        if not self.pipeline.alive:
            raise RuntimeError(f"DataNode {self.node_id}: its pipeline loop stopped")

    def progress(self) -> list[dict]:
        return self.flowgraphs.progress() if self.flowgraphs else []

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop(timeout=10)
        if self.pipeline is not None:
            self.pipeline.stop()
        if self.session is not None:
            self.session.close()
        if self.client is not None:
            self.client.close()
