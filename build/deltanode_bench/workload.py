"""The benchmark's workload: Milvus InsertRequests on pchannel topics, and where each landed.

Messages are built by ``MilvusProducer.insert_request`` (the same header, timestamps,
rowIDs, Int64 pk and VarChar columns a proxy sends) for the scalar fields; the FloatVector
``FieldData`` is taken from a small pool of random blocks generated once per run, because
filling 768,000 floats into a protobuf repeated field costs ~130 ms per message here and
would make the producer, not the DataNode, the subject of the benchmark. The serialized
vector block is appended to the serialized request: protobuf concatenation appends to
``fields_data``, so the bytes on the wire are one ordinary column-based InsertRequest.

Every produced record (inserts, deletes and TimeTicks) is kept as a ``Sent``: topic, offset
(from the delivery report), size and the wall clock at the ``produce()`` call, for wire-byte
counts and insert-to-commit latency; an insert's also its first primary key (its rows have the
keys from it on), a DeleteRequest's its number of keys.
"""

from __future__ import annotations

import base64
import itertools
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, field_data, ticker
from deltanode.wire.milvus_proto import msg_pb2
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.schema import CollectionLayout, DataType, schema_from_json

ROWS_PER_MESSAGE = 1000


def bench_schema(dim: int) -> dict:
    """Int64 pk, a VarChar and one FloatVector of ``dim`` (the issue's collection)."""
    return {"fields": [
        {"name": "pk", "data_type": "Int64", "is_primary_key": True},
        {"name": "title", "data_type": "VarChar", "max_length": 64},
        {"name": "vec", "data_type": "FloatVector", "dim": dim},
    ]}


@dataclass
class Sent:
    topic: str
    size: int
    rows: int          # 0 for a TimeTick or a DeleteRequest
    t: float           # time.time() when produce() was called
    offset: int = -1   # position, set by the delivery report (Kafka offset or Pulsar position)
    error: str = ""
    first_pk: int = 0  # an InsertRequest's first key
    deletes: int = 0   # a DeleteRequest's keys


class BenchProducer(MilvusProducer):
    """MilvusProducer that records every record it sends and reuses vector blocks."""

    def __init__(self, proxy: Proxy, layout: CollectionLayout, collection_id: int, collection_name: str,
                 pool: int = 4, rows: int = ROWS_PER_MESSAGE, seed: int = 7) -> None:
        vectors = [f for f in layout.fields if f.data_type == DataType.FloatVector]
        scalars = CollectionLayout(tuple(f for f in layout.fields if f.data_type != DataType.FloatVector))
        if [f.name for f in layout.fields] != [f.name for f in scalars.fields] + [f.name for f in vectors]:
            raise ValueError("vector fields must come last in the benchmark schema")
        # insert_request() builds the scalar part; the vector blocks are appended to it.
        super().__init__(proxy, scalars, collection_id, collection_name, seed=seed)
        self.full_layout = layout
        self.rows = rows
        rng = np.random.default_rng(seed + 1)
        self._pool = [b"".join(msg_pb2.InsertRequest(fields_data=[field_data(v, rows, rng, 0)]).SerializeToString()
                               for v in vectors) for _ in range(pool)]
        self._next_block = itertools.cycle(range(pool))
        self.sent: list[Sent] = []

    def _send(self, pchannel: str, payload: bytes, rows: int = 0, first_pk: int = 0) -> None:
        rec = Sent(pchannel, len(payload), rows, time.time(), first_pk=first_pk)

        def delivered(position: int, error: str) -> None:
            rec.offset, rec.error = position, error

        self.bytes += len(payload)
        self.sent.append(rec)
        self.producer.produce(pchannel, payload, on_delivery=delivered)

    def insert_message(self, pchannel: str, vchannel: str, segment_id: int, partition_id: int = 1) -> Sent:
        """Produce one InsertRequest of ``self.rows`` rows; returns its record."""
        with self._lock:
            req = self.insert_request(vchannel, segment_id, partition_id, self.rows)
            payload = req.SerializeToString() + self._pool[next(self._next_block)]
            self._send(pchannel, payload, self.rows, req.rowIDs[0])
            return self.sent[-1]

    def delete_keys(self, pchannel: str, vchannel: str, partition_id: int, pks: list[int]) -> Sent:
        """Produce one DeleteRequest (``MilvusProducer.delete``); returns its record."""
        with self._lock:   # reentrant: the record appended last is this request's
            self.delete(pchannel, vchannel, partition_id, pks)
            rec = self.sent[-1]
            rec.deletes = len(pks)
            return rec


@dataclass
class BenchCollection:
    collection_id: int
    name: str
    dim: int
    pchannels: list[str]
    vchannels: list[str]
    schema_b64: str
    producer: BenchProducer
    segments: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def produce_backlog(self, messages: int) -> None:
        """``messages`` InsertRequests on every vchannel, round robin, as fast as possible."""
        for _ in range(messages):
            for p, v in zip(self.pchannels, self.vchannels):
                self.producer.insert_message(p, v, self.segments[v])
        self.producer.flush_producer(120)

    def settled_targets(self) -> dict[str, int]:
        """Per vchannel, the pchannel's high watermark once it covers everything produced.

        Tansu's high watermark excludes the last record batch (docs/platform.md): two
        flushed ticks first.
        """
        for _ in range(2):
            for p in self.pchannels:
                self.producer.tick(p)
            self.producer.flush_producer()
        wm = self.producer.broker.watermarks()
        try:
            return {v: wm.high(p) for p, v in zip(self.pchannels, self.vchannels)}
        finally:
            wm.close()

    def close(self) -> None:
        """Stop the ticker and the producer."""
        self._stop.set()
        self.producer.proxy.close()


def make_collection(broker: Broker, collection_id: int, dim: int, shards: int,
                    tick_interval: float = 0.2) -> BenchCollection:
    """A collection with ``shards`` vchannels, each on its own pchannel topic, ticking."""
    name = f"bench{collection_id}"
    prefix = f"{name}-rootcoord-dml"
    pchannels = [pchannel_name(prefix, i) for i in range(shards)]
    vchannels = [vchannel_name(p, collection_id, i) for i, p in enumerate(pchannels)]
    broker.create_topics(pchannels)
    schema = schema_from_json(bench_schema(dim), name)
    layout = CollectionLayout.from_proto(schema)
    producer = BenchProducer(Proxy(broker), layout, collection_id, name)
    coll = BenchCollection(collection_id, name, dim, pchannels, vchannels,
                           base64.b64encode(schema.SerializeToString()).decode(), producer,
                           {v: 1000 + i for i, v in enumerate(vchannels)})
    ticker(producer, pchannels, coll._stop, tick_interval)
    return coll
