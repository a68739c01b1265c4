"""``./spark-submit.sh datanode``: one DataNode against the configured etcd and broker."""

from __future__ import annotations

import logging
import signal
import threading

from ..config import Conf
from .node import DataNode, SessionLost
from .progress import ProgressReporter
from .spark import spark_session

log = logging.getLogger("deltanode.datanode")


def require_kafka(conf: Conf) -> None:
    if conf.get("mq.type") != "kafka":
        raise SystemExit(f"mq.type = {conf.get('mq.type')} ({conf.source('mq.type')}): this DeltaNode version's "
                         f"flowgraph reads Kafka-protocol brokers only; Pulsar is not supported yet")


def run(conf: Conf) -> int:
    require_kafka(conf)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    spark = spark_session(conf)
    node = DataNode(conf, spark)
    reporter = ProgressReporter(conf.get("standalone.progress.interval"))
    try:
        node.start()
        while not stop.wait(1.0):
            node.poll()
            reporter.maybe_report(node.progress())
        log.info("stopping")
        return 0
    except SessionLost as e:
        log.error("%s", e)
        return 1
    finally:
        node.stop()
        spark.stop()
