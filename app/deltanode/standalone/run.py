"""``./spark-submit.sh standalone``: embedded services, rootcoord's TimeTicks, a channel assigner
and one DataNode.

In mirror mode (``milvus.meta.root`` set) it runs beside a Milvus: the collections, their
topics and the TimeTicks on them are Milvus's, so standalone creates no topic and writes no tick.
"""

from __future__ import annotations

import logging

from ..config import Conf
from ..config.settings import Settings
from ..datacoord.catalog import list_collections
from ..datacoord.coordinator import DataCoord
from ..datanode.node import DataNode
from ..datanode.progress_lines import ProgressReporter
from ..datanode.spark import SPARK_STOP_TIMEOUT, spark_context, start_spark_context, stop_spark
from ..driver_gc import tune_for_driver
from ..etcd import keys
from ..etcd.client import EtcdClient
from ..mq.broker import Broker, BrokerError
from .lifecycle import ServiceGroup
from .services import ServiceError
from .timeticks import TimeTicker

log = logging.getLogger("deltanode.standalone")


def _stop_spark(sc) -> None:
    if not stop_spark(sc):
        raise RuntimeError(f"Spark did not stop within {SPARK_STOP_TIMEOUT:.0f} s; going on with the rest")


class LostTopics(ServiceError):
    """The broker no longer has the pchannel topics of collections in the catalog."""


def refuse_lost_topics(client: EtcdClient, settings: Settings, created: list[str]) -> None:
    """Raise LostTopics when a topic the broker had to create carries a collection of the catalog.

    Its messages are gone, and its vchannels' positions (checkpoints in Delta, seek positions in
    etcd) point into the old topic: reading the new one would fail while it is shorter and then
    skip its first messages up to those offsets without a word. A broker whose data directory
    was removed (or an external one replaced) comes here."""
    root = settings.etcd.root
    lost = sorted({p for r in list_collections(client, root) for p in r.pchannels} & set(created))
    if lost:
        data, storage = str(settings.embedded.data_dir), str(settings.storage.root)
        remove = data if storage.startswith(data.rstrip("/") + "/") else f"{data} and {storage}"
        raise LostTopics(
            f"the {settings.broker.kind} broker has lost the topics {', '.join(lost)}, which carry collections of the "
            f"catalog under {root}; reading new topics from the old positions would skip "
            f"messages. To start over, remove {remove}")


def forget_earlier_sessions(client: EtcdClient, root: str) -> None:
    """Remove the DataNode sessions an earlier run left in the embedded etcd. Only this process
    uses that etcd, so their DataNodes are gone; a run that could not revoke its lease on the way
    out (its JVM killed first, a SIGKILL) would otherwise keep its channels for the lease's 30 s
    after the restart (etcd renews the leases it finds when it starts), no DataNode serving them."""
    for key, _, _ in client.get_prefix(keys.session_prefix(root, "datanode")):
        if client.delete(key):
            log.info("removed %s, left by an earlier run", key)


def run(conf: Conf) -> int:
    tune_for_driver()
    settings = Settings.of(conf)
    mirror = settings.mirror.enabled
    with ServiceGroup(settings.embedded) as group:
        broker = Broker.of(settings.broker)
        pchannels = settings.pchannels.names()
        client = EtcdClient(settings.etcd.endpoints, security=settings.etcd.security)
        group.add("etcd client", client.close)
        if settings.embedded.etcd:
            forget_earlier_sessions(client, settings.etcd.root)
        try:   # any broker, mirror mode too: one that refuses our credentials or certificate is named now,
            broker.ping(pchannels[0], timeout=10.0)   # not left to fail every read and TimeTick after start
        except BrokerError as e:
            raise ServiceError(str(e)) from None
        if not mirror:
            try:
                created = broker.create_topics(pchannels)
            except BrokerError as e:   # unreachable, or refused our login or TLS: one line and exit 1 (cli)
                raise ServiceError(str(e)) from None
            if created:
                log.info("created %d pchannel topics on %s", len(created), broker.address)
                refuse_lost_topics(client, settings, created)
            if settings.timetick_interval > 0:
                ticker = TimeTicker(broker, pchannels, settings.timetick_interval).start()
                group.add("timeticks", ticker.stop)
        coord = DataCoord.of(settings, client).start()
        group.add("channel assigner", coord.stop)
        spark = conf.spark_conf()   # spark.* keys, handed to Spark untouched
        log.info("starting Spark (%s)", spark.get("spark.master", "local[2]"))
        sc = spark_context(start_spark_context(spark, "deltanode-standalone"), settings)
        group.add("spark", lambda: _stop_spark(sc))
        node = DataNode(settings, sc)
        group.add("datanode", node.stop)
        node.start()
        log.info("standalone up: etcd %s, %s broker %s, Delta tables under %s, collections from %s; Ctrl-C to stop",
                 settings.etcd.endpoints, broker.kind, broker.address, settings.storage.root,
                 coord.catalog.describe())
        reporter = ProgressReporter(settings.node.progress_interval)
        while not group.wait(1.0):
            restarted = group.check()   # an embedded service that exited is started again
            if group.broker is not None and group.broker.name in restarted and not mirror:
                # The embedded broker restarted: its topics are on disk, unless its data was removed
                # meanwhile (Pulsar creates topics on first use: none to create there).
                created = broker.create_topics(pchannels)
                if created:
                    refuse_lost_topics(client, settings, created)
            if not node.poll():
                log.info("stopping (Spark stopped)")
                break
            reporter.maybe_report(node.progress, node.alerts, node.publish)
        else:
            log.info("stopping (%s)", group.stop_reason or "requested")
    return 0
