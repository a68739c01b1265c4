"""The catalog a conf asks for: DeltaNode's own, or a Milvus's meta when ``milvus.meta.root`` is set."""

from __future__ import annotations

from ..config import Conf
from ..etcd.client import EtcdClient
from ..mq.broker import Broker
from ..wire.positions import CODECS
from .catalog import Catalog, OwnCatalog
from .milvus_catalog import MilvusCatalog


def open_catalog(conf: Conf, client: EtcdClient) -> Catalog:
    """``client``: DeltaNode's etcd (``etcd.endpoints``). Close the catalog when done."""
    meta_root = conf.get("milvus.meta.root")
    if meta_root is None:
        return OwnCatalog(client, conf.get("etcd.root"))
    endpoints = conf.get("milvus.etcd.endpoints")
    milvus = client if endpoints in (None, conf.get("etcd.endpoints")) else EtcdClient(endpoints)
    return MilvusCatalog(milvus, meta_root, own_client=client, own_root=conf.get("etcd.root"),
                         broker=Broker.from_conf(conf), positions=CODECS[conf.get("mq.type")],
                         start=conf.get("milvus.start"))
