"""A DataNode: an etcd session, the MEP 7 channel watch, and one flowgraph per owned vchannel.

The etcd client's background thread keeps the session lease alive and delivers channel
watch events; the main thread only polls the flowgraphs. A DataNode never calls the
coordinator: it persists on its own, fenced by its session and its watch keys.
"""

from __future__ import annotations

import logging
import threading

from pyspark.sql import SparkSession

from ..config import Conf
from ..datanode.channel_watch import ChannelWatcher
from ..etcd.client import EtcdClient
from ..etcd.session import Session
from ..storage.layout import StorageLayout
from .flowgraphs import FlowgraphManager, FlowgraphSettings

log = logging.getLogger(__name__)


def _handoff_dir(conf: Conf) -> str | None:
    value = conf.get("datanode.handoff.dir")
    return None if value == "off" else value


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
        settings = FlowgraphSettings(
            bootstrap=conf.get("mq.kafka.bootstrap.servers"), scratch_dir=str(conf.get("datanode.checkpoint.dir")),
            trigger_interval=f"{int(conf.get('datanode.trigger.interval') * 1000)} milliseconds",
            max_messages=conf.get("datanode.batch.max.messages"), max_bytes=conf.get("datanode.batch.max.bytes"),
            checkpoint_interval_ms=int(conf.get("datanode.checkpoint.interval") * 1000),
            splits=conf.get("datanode.read.splits"), handoff_dir=_handoff_dir(conf),
            fence={"endpoints": conf.get("etcd.endpoints"), "root": root})
        self.flowgraphs = FlowgraphManager(self.spark, StorageLayout(str(conf.get("storage.root"))),
                                           self.session.server_id, settings)
        self.watcher = ChannelWatcher(self.client, root, self.session.server_id, self.flowgraphs).start()
        log.info("DataNode %d up: watching %s/channelwatch/%d/", self.node_id, root, self.node_id)
        return self

    def _on_lost(self, reason: str) -> None:
        self.lost_reason = reason
        self.lost.set()

    def poll(self) -> None:
        """Run from the main loop; raises SessionLost once the session is gone."""
        if self.lost.is_set():
            raise SessionLost(f"DataNode {self.node_id} lost its etcd session ({self.lost_reason}); "
                              f"its channels are being reassigned")
        self.flowgraphs.poll()

    def progress(self) -> list[dict]:
        return self.flowgraphs.progress() if self.flowgraphs else []

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop(timeout=10)
        if self.flowgraphs is not None:
            self.flowgraphs.stop_all()
        if self.session is not None:
            self.session.close()
        if self.client is not None:
            self.client.close()
