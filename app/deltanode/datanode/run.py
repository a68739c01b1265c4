"""``./spark-submit.sh datanode``: one DataNode against the configured etcd and broker."""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import TYPE_CHECKING

from ..config import Conf
from ..driver_gc import tune_for_driver
from ..logs import flush_logs
from .spark import SPARK_STOP_TIMEOUT, spark_context, start_spark_context, stop_spark

if TYPE_CHECKING:
    from ..config.settings import Settings

log = logging.getLogger("deltanode.datanode")


def check_broker(settings: Settings) -> None:
    """Stop at start when the broker refuses this node (its login, token or certificate): every read
    would fail the same way. A broker that does not answer yet is waited for, as a running node
    waits: it may be starting with the rest of the cluster."""
    from ..mq.broker import Broker, BrokerError, BrokerRefused
    try:
        Broker.of(settings.broker).ping(settings.pchannels.names()[0], timeout=10.0)
    except BrokerRefused:
        raise
    except BrokerError as e:
        log.warning("the broker does not answer yet (%s); starting all the same", e)


def run(conf: Conf) -> int:
    # The handler only appends: a second signal arriving inside threading.Event.set deadlocked
    # on the Event's own lock, and the DataNode never exited.
    signals: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: signals.append(signum))
    started = start_spark_context(conf.spark_conf())
    # The node's modules (pyarrow, deltalake, the pipeline: ~1 s of imports) load while Spark starts.
    from ..config.settings import Settings
    from .node import DataNode
    from .progress_lines import ProgressReporter
    tune_for_driver()
    settings = Settings.of(conf)
    check_broker(settings)
    sc = spark_context(started, settings)
    node = DataNode(settings, sc)
    reporter = ProgressReporter(settings.node.progress_interval)
    try:
        node.start()
        while not signals and node.poll():
            reporter.maybe_report(node.progress, node.alerts, node.publish)
            time.sleep(1.0)
        log.info("stopping (%s)", "a signal" if signals else "Spark stopped")
        return 0
    finally:
        node.stop()
        if not stop_spark(sc):
            log.error("Spark did not stop within %.0f s (its JVM is gone?); exiting now", SPARK_STOP_TIMEOUT)
            flush_logs()
            os._exit(1)
