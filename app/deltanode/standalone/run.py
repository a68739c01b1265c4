"""``./spark-submit.sh standalone``: embedded services, rootcoord's TimeTicks, a channel assigner
and one DataNode."""

from __future__ import annotations

import logging

from ..config import Conf
from ..datacoord.coordinator import DataCoord
from ..datanode.node import DataNode
from ..datanode.progress import ProgressReporter
from ..datanode.spark import SPARK_STOP_TIMEOUT, spark_session, stop_spark
from ..etcd.client import EtcdClient
from ..mq.broker import Broker
from ..storage.layout import StorageLayout
from ..wire.positions import CODECS
from ..wire.names import pchannel_name
from .lifecycle import ServiceGroup
from .timeticks import TimeTicker

log = logging.getLogger("deltanode.standalone")


def _stop_spark(spark) -> None:
    if not stop_spark(spark):
        raise RuntimeError(f"Spark did not stop within {SPARK_STOP_TIMEOUT:.0f} s; going on with the rest")


def run(conf: Conf) -> int:
    with ServiceGroup(conf) as group:
        broker = Broker.from_conf(conf)
        pchannels = [pchannel_name(conf.get("mq.pchannel.prefix"), i) for i in range(conf.get("mq.pchannel.count"))]
        created = broker.create_topics(pchannels)
        if created:
            log.info("created %d pchannel topics on %s", len(created), broker.address)
        if conf.get("standalone.timetick.interval") > 0:
            ticker = TimeTicker(broker, pchannels, conf.get("standalone.timetick.interval")).start()
            group.add("timeticks", ticker.stop)
        client = EtcdClient(conf.get("etcd.endpoints"))
        group.add("etcd client", client.close)
        coord = DataCoord(client, conf.get("etcd.root"), StorageLayout.from_conf(conf),
                          CODECS[conf.get("mq.type")], watch_timeout=conf.get("datacoord.watch.timeout"),
                          balance=conf.get("datacoord.channel.balance")).start()
        group.add("channel assigner", coord.stop)
        log.info("starting Spark (%s)", conf.spark_conf().get("spark.master", "local[2]"))
        spark = spark_session(conf, "deltanode-standalone")
        group.add("spark", lambda: _stop_spark(spark))
        node = DataNode(conf, spark)
        group.add("datanode", node.stop)
        node.start()
        log.info("standalone up: etcd %s, %s broker %s, Delta tables under %s; Ctrl-C to stop",
                 conf.get("etcd.endpoints"), broker.kind, broker.address, conf.get("storage.root"))
        reporter = ProgressReporter(conf.get("standalone.progress.interval"))
        while not group.wait(1.0):
            if group.broker is not None and group.broker.name in group.check() and broker.kind == "kafka":
                created = broker.create_topics(pchannels)
                log.warning("the embedded broker keeps its topics in memory: re-created %d pchannel topics; "
                            "vchannels whose positions it lost fail alone", len(created))
            node.poll()
            reporter.maybe_report(node.progress, node.alerts, node.publish)
        log.info("stopping (%s)", group.stop_reason or "requested")
    return 0
