"""DataCoord's channel side: the catalog and the Delta meta feed MEP 7's ChannelManager.

Which vchannels exist comes from the catalog (DeltaNode's own, or a Milvus's meta in mirror
mode); whether a collection was dropped, and where each channel resumes, from the Delta meta
the DataNodes commit. DataNodes never wait on this process: it only hands channels out.

A collection's schema is the catalog's as of each hand-out (a watch carries it). A schema that
changes in the catalog (in mirror mode, Milvus's RootCoord saving a field added to the live
collection) is logged and rewrites no watch: a running vchannel's flowgraph takes the change where
its own stream carries it (the order of the two does not matter), and a vchannel handed out later
(a restart, a move) starts with the catalog's newer schema and reads its older inserts, which lack
the new fields, as null there.
"""

from __future__ import annotations

import logging
import time

from ..config.settings import Settings
from ..delta.delta_log import DeltaLog
from ..delta.layout import StorageLayout
from ..etcd.client import EtcdClient, PrefixWatch
from ..state import meta
from ..wire.datapb import VchannelInfo
from ..wire.milvus_proto import schema_pb2
from ..wire.positions import CODECS, PositionCodec
from .catalog import Catalog, CollectionRecord, CollectionStatus
from .catalog_of_conf import open_catalog
from .channel_manager import ChannelManager, ChannelSpec
from .vchannel_info import vchannel_info

log = logging.getLogger(__name__)


def _log_schema_changes(before: dict[str, CollectionRecord], now: list[CollectionRecord]) -> None:
    """Logs each collection whose schema the catalog gives changed since the last read (a field
    added to a live Milvus collection). Nothing else follows from it: a watch handed out from now on
    carries the new schema, and a vchannel watched already keeps the one its flowgraph writes with
    until it reads the change from its own stream (Milvus broadcasts it to every vchannel), where
    its rows change."""
    known = {r.collection_id: r for r in before.values()}
    for r in now:
        old = known.get(r.collection_id)
        if old is None or old.schema_b64 == r.schema_b64:
            continue
        was, schema = old.schema, r.schema
        names = {f.name for f in was.fields} | {f.name for f in was.struct_array_fields}
        added = [f.name for f in (*schema.fields, *schema.struct_array_fields) if f.name not in names]
        log.info("collection %d (%s): the catalog gives schema version %d (was %d; fields added: %s); a watch handed "
                 "out from now on carries it, a watched vchannel takes it where its stream changes it",
                 r.collection_id, r.name, schema.version, was.version, ", ".join(added) or "none")


class DataCoord:
    def __init__(self, client: EtcdClient, root: str, storage: StorageLayout, positions: PositionCodec,
                 catalog: Catalog, watch_timeout: float = 300.0, refresh_interval: float = 5.0,
                 balance: bool = True) -> None:
        """``positions``: the broker's (``wire.positions.CODECS[mq.type]``), for the seek positions it hands out."""
        self.client, self.root, self.storage, self.positions = client, root, storage, positions
        self.catalog = catalog
        self.refresh_interval = refresh_interval
        self._records: dict[str, CollectionRecord] = {}     # vchannel -> record
        self._dropped: set[str] = set()                     # vchannels whose collection Delta says was dropped
        self._logs: dict[int, DeltaLog] = {}                # collection -> its insert_log, followed commit by commit
        self._refreshed = 0.0
        self._catalog_watch: PrefixWatch | None = None
        self.manager = ChannelManager(client, root, self.channels, self.recovery, self.schema,
                                      watch_timeout=watch_timeout, balance=balance)

    @classmethod
    def of(cls, settings: Settings, client: EtcdClient) -> "DataCoord":
        """The coordinator ``settings`` describe, on DeltaNode's etcd ``client`` (not started)."""
        return cls(client, settings.etcd.root, StorageLayout.of(settings.storage), CODECS[settings.broker.kind],
                   open_catalog(settings, client), watch_timeout=settings.datacoord.watch_timeout,
                   balance=settings.datacoord.balance)

    def _catalog_changed(self) -> None:
        self._refreshed = 0.0
        self.manager.wake()

    def _refresh(self) -> None:
        if time.monotonic() - self._refreshed < self.refresh_interval and self._records:
            return
        self._refreshed = time.monotonic()
        records = self.catalog.collections()
        _log_schema_changes(self._records, records)
        self._records = {v: r for r in records for v in r.vchannels}
        for r in records:
            insert_log = self._logs.get(r.collection_id)
            if insert_log is None:
                self._logs[r.collection_id] = self._first_look(r)
            else:
                self._dropped |= meta.dropped_vchannels(insert_log.refresh())   # only the commits since the last pass

    def _first_look(self, r: CollectionRecord) -> DeltaLog:
        """The collection's insert_log, to follow from now on: a table that exists is opened and
        its vchannels' newest states read; one not created yet is followed from its version 0."""
        uri = self.storage.insert_log(r.collection_id)
        insert_log = DeltaLog.open(uri, self.storage.options)
        if insert_log is None:
            insert_log = DeltaLog.follow(uri, self.storage.options)
            self._dropped |= meta.dropped_vchannels(insert_log.refresh())
            return insert_log
        for v in r.vchannels:
            state = meta.channel_state_in(insert_log, v)
            if state is not None and state.collection_dropped:
                self._dropped.add(v)
        return insert_log

    def channels(self) -> dict[str, ChannelSpec]:
        self._refresh()
        return {v: ChannelSpec(v, r.collection_id, r.state == CollectionStatus.DROPPED or v in self._dropped)
                for v, r in self._records.items()}

    def recovery(self, vchannel: str) -> VchannelInfo:
        """Where ``vchannel`` resumes, from the collection's insert_log followed up to now.

        Not a table opened for the call: when many vchannels are handed out at once, the second
        shard of each collection finds its table just created by the node's watch of the first,
        and opening it with delta-rs costs more than the assignment itself (docs/platform.md, "etcd
        3.4 (channel watches and hand-outs)")."""
        self._refresh()
        record = self._records[vchannel]
        insert_log = self._logs[record.collection_id]
        self._dropped |= meta.dropped_vchannels(insert_log.refresh())
        return vchannel_info(meta.channel_state_in(insert_log, vchannel), record, vchannel,
                             lambda: self.catalog.start_position(record, vchannel), self.positions)

    def schema(self, vchannel: str) -> schema_pb2.CollectionSchema | None:
        record = self._records.get(vchannel)
        return record.schema if record else None

    def start(self) -> "DataCoord":
        self._catalog_watch = self.catalog.watch(self._catalog_changed)
        self.manager.start()
        log.info("channel manager up under %s/channelwatch/, collections from %s", self.root, self.catalog.describe())
        return self

    def stop(self) -> None:
        if self._catalog_watch is not None:
            self._catalog_watch.cancel()
        self.manager.stop()
        self.catalog.close()
