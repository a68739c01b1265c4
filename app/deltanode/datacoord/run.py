"""``./spark-submit.sh datacoord``: the channel assigner (MEP 7 coordinator side)."""

from __future__ import annotations

import logging
import signal
import threading

from ..config import Conf
from ..etcd.client import EtcdClient
from ..storage.layout import StorageLayout
from ..wire.positions import CODECS
from .coordinator import DataCoord

log = logging.getLogger("deltanode.datacoord")


def run(conf: Conf) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with EtcdClient(conf.get("etcd.endpoints")) as client:
        coord = DataCoord(client, conf.get("etcd.root"), StorageLayout.from_conf(conf),
                          CODECS[conf.get("mq.type")], watch_timeout=conf.get("datacoord.watch.timeout"),
                          balance=conf.get("datacoord.channel.balance")).start()
        try:
            stop.wait()
            log.info("stopping")
        finally:
            coord.stop()
    return 0
