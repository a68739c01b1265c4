"""The catalog a conf asks for: DeltaNode's own, or a Milvus's meta when ``milvus.meta.root`` is set."""

from __future__ import annotations

from ..config.settings import Settings
from ..etcd.client import EtcdClient
from ..mq.broker import Broker
from ..wire.positions import CODECS
from .catalog import Catalog, OwnCatalog
from .milvus_catalog import MilvusCatalog


def open_catalog(settings: Settings, client: EtcdClient) -> Catalog:
    """``client``: DeltaNode's etcd (``etcd.endpoints``). Close the catalog when done."""
    mirror = settings.mirror
    if mirror.meta_root is None:
        return OwnCatalog(client, settings.etcd.root)
    endpoints = mirror.etcd_endpoints
    milvus = client if endpoints in (None, settings.etcd.endpoints) else \
        EtcdClient(endpoints, security=mirror.etcd_security)
    return MilvusCatalog(milvus, mirror.meta_root, own_client=client, own_root=settings.etcd.root,
                         broker=Broker.of(settings.broker), positions=CODECS[settings.broker.kind], start=mirror.start)
