"""Where collections come from: DeltaNode's own catalog in etcd, or a Milvus's meta (mirror mode).

Both are a ``Catalog``: the collections with their schema, vchannels and start positions, a
watch that tells when they change, and where a vchannel that never committed starts.

DeltaNode's own catalog is what rootcoord records when a collection is created: key
``{root}/deltanode/collections/{collectionID}`` holds JSON: name, schema (base64
``schema.CollectionSchema``), shard count, vchannels, pchannels, start positions (the
offset of the CreateCollection message broadcast to each pchannel) and state. The Milvus
source is ``milvus_catalog.MilvusCatalog``.
"""

from __future__ import annotations

import base64
import enum
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from ..etcd.client import EtcdClient, PrefixWatch
from ..failure.errors import DeltaNodeError
from ..mq.broker import Broker, BrokerError
from ..wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from ..wire.names import check_safe, pchannel_name, pchannel_of, vchannel_name
from ..wire.positions import now_ts


class CollectionStatus(enum.StrEnum):
    """A collection's state in its catalog (the catalog's JSON holds the value)."""

    CREATED = "created"
    DROPPING = "dropping"    # a Milvus collection being dropped: its vchannels run on until they read the drop
    DROPPED = "dropped"



class CatalogError(DeltaNodeError):
    """A catalog request that cannot be carried out (name taken, broker down, ...)."""


@dataclass
class CollectionRecord:
    collection_id: int
    name: str
    schema_b64: str
    shards: int
    vchannels: list[str]
    pchannels: list[str]
    start_offsets: dict[str, int] = field(default_factory=dict)  # pchannel -> offset
    start_ts: int = 0
    state: CollectionStatus = CollectionStatus.CREATED
    database: str = "default"
    partitions: dict[str, int] = field(default_factory=dict)  # name -> ID, where the source knows them

    @property
    def schema(self) -> schema_pb2.CollectionSchema:
        return schema_pb2.CollectionSchema.FromString(base64.b64decode(self.schema_b64))


def encode_schema(schema: schema_pb2.CollectionSchema) -> str:
    """``CollectionRecord.schema_b64`` of ``schema``."""
    return base64.b64encode(schema.SerializeToString()).decode()


@dataclass(frozen=True, kw_only=True)
class StartPosition:
    """Where a vchannel that never committed starts: the first offset to read, and the seek ts
    (messages at or before it are skipped until a TimeTick reaches it)."""

    offset: int
    ts: int
    # Mirror mode: segments a Milvus persisted before this position, imported before the stream
    # is read from it (their ids, as Milvus's DataCoord hands them to its DataNodes).
    flushed: tuple[int, ...] = ()
    unflushed: tuple[int, ...] = ()


class Catalog(Protocol):
    """A source of collections for the coordinator and the admin commands."""

    kind: str   # "deltanode" or "milvus"

    def describe(self) -> str:
        """Where the collections come from, for logs and errors."""

    def collections(self) -> list[CollectionRecord]:
        """Every collection, dropped ones included while the source keeps them."""

    def watch(self, on_change: Callable[[], None]) -> PrefixWatch:
        """Call ``on_change`` (on a watch thread) whenever the collections may have changed."""

    def start_position(self, record: CollectionRecord, vchannel: str) -> StartPosition:
        """Where ``vchannel`` of ``record`` starts when it has no checkpoint."""

    def close(self) -> None:
        """Release what the catalog opened itself (not the client it was given)."""


class OwnCatalog:
    """DeltaNode's own catalog under ``{root}/deltanode/collections/`` (``admin create-collection``)."""

    kind = "deltanode"

    def __init__(self, client: EtcdClient, root: str) -> None:
        self.client, self.root = client, root

    def describe(self) -> str:
        return f"DeltaNode's catalog under {catalog_prefix(self.root)}"

    def collections(self) -> list[CollectionRecord]:
        return list_collections(self.client, self.root)

    def watch(self, on_change: Callable[[], None]) -> PrefixWatch:
        return self.client.watch_prefix(catalog_prefix(self.root), lambda _event: on_change())

    def start_position(self, record: CollectionRecord, vchannel: str) -> StartPosition:
        """Right after the CreateCollection message the catalog broadcast to the pchannel."""
        return StartPosition(offset=record.start_offsets.get(pchannel_of(vchannel), -1) + 1, ts=record.start_ts)

    def close(self) -> None:
        pass


def find_record(records: list[CollectionRecord], name_or_id: str) -> CollectionRecord | None:
    """The live collection named ``name_or_id`` (else the newest of that name), or the one with that ID."""
    named = [r for r in records if r.name == name_or_id]
    live = [r for r in named if r.state != CollectionStatus.DROPPED]
    if live or named:
        return (live or named)[-1]
    if name_or_id.isdigit():
        return next((r for r in records if r.collection_id == int(name_or_id)), None)
    return None


def catalog_prefix(root: str) -> str:
    """Where the collection records are (watched by the coordinator)."""
    return f"{root}/deltanode/collections/"


def _id_key(root: str) -> str:
    return f"{root}/deltanode/collection-id"


def list_collections(client: EtcdClient, root: str) -> list[CollectionRecord]:
    records = [json.loads(value) for _, value, _ in client.get_prefix(catalog_prefix(root))]
    return [CollectionRecord(**dict(r, state=CollectionStatus(r.get("state", CollectionStatus.CREATED))))
            for r in records]


def _allocate_ids(client: EtcdClient, root: str, n: int) -> range:
    """``n`` new collection IDs, TSO-like as Milvus's are (``ms << 18``), unique through CAS."""
    key = _id_key(root)
    for _ in range(100):
        current = client.get(key)
        last = int(current[0]) if current else 0
        first = max(last + 1, now_ts())
        new = str(first + n - 1)
        if current is None:
            if client.put_if_absent(key, new):
                return range(first, first + n)
        elif client.compare_value_and_swap(key, current[0], new):
            return range(first, first + n)
    raise CatalogError("could not allocate collection IDs (etcd contention)")


def _create_message(record: CollectionRecord) -> bytes:
    """The CreateCollectionRequest rootcoord broadcasts to each of the collection's pchannels."""
    return msg_pb2.CreateCollectionRequest(
        base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreateCollection, timestamp=record.start_ts),
        collectionName=record.name, collectionID=record.collection_id,
        schema=base64.b64decode(record.schema_b64), virtualChannelNames=record.vchannels,
        physicalChannelNames=record.pchannels).SerializeToString()


@dataclass(frozen=True, kw_only=True)
class NewCollection:
    """A collection to create: its name, schema and number of shards (vchannels)."""

    name: str
    schema: schema_pb2.CollectionSchema
    shards: int = 1


RECORDS_PER_TXN = 64   # etcd refuses a transaction of more than 128 operations (--max-txn-ops)


def create_collection(client: EtcdClient, root: str, broker: Broker, name: str,
                      schema: schema_pb2.CollectionSchema, shards: int, pchannel_prefix: str,
                      pchannel_count: int) -> CollectionRecord:
    return create_collections(client, root, broker, [NewCollection(name=name, schema=schema, shards=shards)],
                              pchannel_prefix, pchannel_count)[0]


def create_collections(client: EtcdClient, root: str, broker: Broker, new: Sequence[NewCollection],
                       pchannel_prefix: str, pchannel_count: int) -> list[CollectionRecord]:
    """Create ``new`` as rootcoord does, in one go: one read of the catalog, one block of IDs, the
    pchannels least used first, one broadcast of their CreateCollection messages (the start
    positions), then the records, ``RECORDS_PER_TXN`` to an etcd transaction. Created one at a
    time, each collection would read the whole catalog, and thousands of them would take hours.

    Checked before anything is written: names (safe, unique, not taken by a live collection)
    and shard counts. A failed transaction leaves the records of the earlier ones created (the
    error says how many); CreateCollection messages of collections not recorded are ignored by
    DataNodes, which only read the vchannels of recorded collections."""
    existing = list_collections(client, root)
    live = {c.name for c in existing if c.state == CollectionStatus.CREATED}
    seen: set[str] = set()
    for c in new:
        check_safe("collection", c.name)
        if not 1 <= c.shards <= pchannel_count:
            raise CatalogError(f"--shards must be between 1 and mq.pchannel.count ({pchannel_count}), "
                               f"got {c.shards}")
        if c.name in live or c.name in seen:
            raise CatalogError(f"a collection named {c.name!r} already exists")
        seen.add(c.name)
    if not new:
        return []
    usage = Counter({pchannel_name(pchannel_prefix, i): 0 for i in range(pchannel_count)})
    for record in existing:
        usage.update(p for p in record.pchannels if p in usage)
    records = []
    for c, collection_id in zip(new, _allocate_ids(client, root, len(new))):
        pchannels = [p for p, _ in sorted(usage.items(), key=lambda kv: (kv[1], int(kv[0].rsplit("_", 1)[1])))]
        pchannels = pchannels[:c.shards]
        usage.update(pchannels)
        records.append(CollectionRecord(collection_id, c.name, encode_schema(c.schema), c.shards,
                                        [vchannel_name(p, collection_id, i) for i, p in enumerate(pchannels)],
                                        pchannels, start_ts=now_ts()))
    messages = [(p, r) for r in records for p in sorted(set(r.pchannels))]
    try:
        broker.create_topics(sorted({p for p, _ in messages}))
        positions = broker.send_all([(p, _create_message(r)) for p, r in messages])
    except BrokerError as e:
        raise CatalogError(f"could not broadcast CreateCollection to the pchannels: {e}") from None
    for (p, r), at in zip(messages, positions):
        r.start_offsets[p] = at
    prefix = catalog_prefix(root)
    for i in range(0, len(records), RECORDS_PER_TXN):
        chunk = records[i:i + RECORDS_PER_TXN]
        if not client.put_all_if_absent({prefix + str(r.collection_id): json.dumps(asdict(r)) for r in chunk}):
            raise CatalogError(f"collection IDs {chunk[0].collection_id}..{chunk[-1].collection_id} are already in "
                               f"the catalog: {i} of {len(records)} collections created")
    return records
