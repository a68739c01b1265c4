"""Milvus-like traffic for a nemesis run: collections in DeltaNode's catalog, one proxy stand-in
producing inserts, deletes, upserts and flushes into them and a TimeTick every 200 ms on every
pchannel, as Milvus's proxy and rootcoord do. Runs in the nemesis process.

On Kafka the producer is idempotent (``broker.KAFKA_PRODUCER``): a message retried across a
broker kill lands once and in order, as a Milvus proxy's would. Pulsar's producer gives up on a
message after its send timeout (30 s), so a long outage may leave a few out. What the broker holds
is read back afterwards (``ledger``); the producer's own record says only what it tried.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field

from deltanode.datacoord.catalog import CollectionRecord, NewCollection, create_collections
from deltanode.etcd.client import EtcdClient
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.wire.schema import CollectionLayout, schema_from_json

log = logging.getLogger("nemesis.traffic")

SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                     {"name": "vec", "data_type": "FloatVector", "dim": 8},
                     {"name": "title", "data_type": "VarChar", "max_length": 64}]}


@dataclass
class CollectionTraffic:
    """One collection's producer and the keys it inserted (upserts and deletes pick among them)."""

    record: CollectionRecord
    producer: MilvusProducer
    keys: list[int] = field(default_factory=list)
    home: dict[int, int] = field(default_factory=dict)   # key -> the shard of its insert
    generation: int = 0                                   # a flush seals the segments: new ids after it

    def segment(self, shard: int) -> int:
        return 1000 + self.generation * 10 + shard


@dataclass
class Tally:
    inserts: int = 0
    rows: int = 0
    deletes: int = 0
    upserts: int = 0
    flushes: int = 0


class Traffic:
    """Creates ``collections`` collections of 1-2 shards and produces into them on a thread."""

    def __init__(self, *, client: EtcdClient, etcd_root: str, broker: Broker, producer: Broker, prefix: str,
                 pchannels: int, collections: int, seed: int) -> None:
        """``broker``: where the catalog creates the topics; ``producer``: the same broker with the
        producer's client settings."""
        self.rng = random.Random(seed)
        new = [NewCollection(name=f"nemesis_{i}", schema=schema_from_json(SCHEMA, f"nemesis_{i}"),
                             shards=1 + i % 2) for i in range(collections)]
        records = create_collections(client, etcd_root, broker, new, prefix, pchannels)
        self.proxy = Proxy(producer)
        self.collections = [CollectionTraffic(record=r, producer=MilvusProducer(
            self.proxy, CollectionLayout.from_proto(r.schema), r.collection_id, r.name, seed=seed + i))
            for i, r in enumerate(records)]
        self.pchannels = sorted({p for r in records for p in r.pchannels})
        self.tally = Tally()
        self._stop = threading.Event()
        self._ticks: threading.Thread | None = None
        self._thread: threading.Thread | None = None

    def start(self, rate: float) -> None:
        """TimeTicks every 200 ms; about ``rate`` DML messages a second."""
        self._ticks = ticker(self.collections[0].producer, self.pchannels, self._stop)
        self._thread = threading.Thread(target=self._run, args=(rate,), name="traffic", daemon=True)
        self._thread.start()

    def stop_dml(self) -> None:
        """No more DML; the TimeTicks go on (checkpoints move only with them)."""
        self._stop_dml = True
        if self._thread is not None:
            self._thread.join()

    def close(self) -> None:
        self._stop.set()
        if self._ticks is not None:
            self._ticks.join()
        self.proxy.close()

    _stop_dml = False

    error: BaseException | None = None   # what stopped the traffic thread, if anything did

    def _run(self, rate: float) -> None:
        try:
            self._produce(rate)
        except BaseException as e:
            self.error = e
            log.exception("the traffic stopped")

    def _produce(self, rate: float) -> None:
        while not self._stop_dml and not self._stop.wait(self.rng.expovariate(rate)):
            c = self.rng.choice(self.collections)
            roll = self.rng.random()
            if roll < 0.7 or len(c.keys) < 20:
                self._insert(c)
            elif roll < 0.85:
                self._delete(c)
            elif roll < 0.97:
                self._upsert(c)
            else:
                self._flush(c)

    def _insert(self, c: CollectionTraffic) -> None:
        shard = self.rng.randrange(c.record.shards)
        rows = self.rng.randint(1, 40)
        r = c.record
        first = c.producer.insert(r.pchannels[shard], r.vchannels[shard], c.segment(shard), r.collection_id, rows)
        # A key's later deletes and upserts go to the vchannel of its insert, as Milvus's proxy
        # hashes a key to one shard.
        c.keys.extend(range(first, first + rows))
        c.home.update((pk, shard) for pk in range(first, first + rows))
        self.tally.inserts += 1
        self.tally.rows += rows

    def _delete(self, c: CollectionTraffic) -> None:
        for shard, keys in self._by_shard(c, self.rng.sample(c.keys, self.rng.randint(1, 5))).items():
            r = c.record
            c.producer.delete(r.pchannels[shard], r.vchannels[shard], r.collection_id, keys)
        self.tally.deletes += 1

    def _upsert(self, c: CollectionTraffic) -> None:
        pk = self.rng.choice(c.keys)
        shard = c.home[pk]
        r = c.record
        c.producer.upsert(r.pchannels[shard], r.vchannels[shard], c.segment(shard), r.collection_id, pk, 1)
        self.tally.upserts += 1

    def _flush(self, c: CollectionTraffic) -> None:
        for p in sorted(set(c.record.pchannels)):
            c.producer.flush(p)
        c.generation += 1
        self.tally.flushes += 1

    def _by_shard(self, c: CollectionTraffic, keys: list[int]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for pk in keys:
            out.setdefault(c.home[pk], []).append(pk)
        return out
