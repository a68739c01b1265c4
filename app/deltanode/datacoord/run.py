"""``./spark-submit.sh datacoord``: the channel assigner (MEP 7 coordinator side)."""

from __future__ import annotations

import logging
import signal
import time

from ..config import Conf
from ..config.settings import Settings
from ..driver_gc import tune_for_driver
from ..etcd.client import EtcdClient
from .coordinator import DataCoord

log = logging.getLogger("deltanode.datacoord")


def run(conf: Conf) -> int:
    # The handler only appends (see datanode/run.py: setting an Event from it can deadlock).
    signals: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: signals.append(signum))
    tune_for_driver()
    settings = Settings.of(conf)
    with EtcdClient(settings.etcd.endpoints, security=settings.etcd.security) as client:
        coord = DataCoord.of(settings, client).start()
        try:
            while not signals:
                time.sleep(0.5)
            log.info("stopping")
        finally:
            coord.stop()
    return 0
