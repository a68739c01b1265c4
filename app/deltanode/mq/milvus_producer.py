"""Produces Milvus wire messages onto pchannel topics as a proxy and rootcoord would.

Used by the tests, the benchmark and ``admin produce``: InsertRequest/DeleteRequest with the
shardName of a vchannel, TimeTicks for the pchannel, DDL and Flush messages. Record values
are exactly ``proto.Marshal(<request>)`` with no key (docs/milvus-facts.md §1).
"""

from __future__ import annotations

import functools
import itertools
import threading

import numpy as np

from ..wire.milvus_proto import common_pb2, milvus_pb2, msg_pb2, schema_pb2
from ..wire.positions import now_ts
from ..wire.schema import CollectionLayout, DataType
from .broker import Broker

MsgType = common_pb2.MsgType


class TsoClock:
    """Strictly increasing hybrid timestamps."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self, count: int = 1) -> int:
        """Reserve ``count`` consecutive timestamps; returns the first."""
        with self._lock:
            first = max(now_ts(), self._last + 1)
            self._last = first + count - 1
            return first


def field_data(spec, n: int, rng: np.random.Generator, first_pk: int) -> schema_pb2.FieldData:
    fd = schema_pb2.FieldData(type=spec.data_type, field_name=spec.name, field_id=spec.field_id)
    t = spec.data_type
    if t == DataType.FloatVector:
        fd.vectors.dim = spec.dim
        fd.vectors.float_vector.data.extend(rng.random(n * spec.dim, dtype=np.float32))
    elif t == DataType.BinaryVector:
        fd.vectors.dim = spec.dim
        fd.vectors.binary_vector = rng.bytes(n * spec.dim // 8)
    elif t == DataType.Float16Vector:
        fd.vectors.dim = spec.dim
        fd.vectors.float16_vector = rng.random(n * spec.dim).astype(np.float16).tobytes()
    elif t == DataType.Int64:
        fd.scalars.long_data.data.extend(range(first_pk, first_pk + n) if spec.is_primary_key
                                         else rng.integers(0, 1 << 40, n).tolist())
    elif t in (DataType.Int8, DataType.Int16, DataType.Int32):
        fd.scalars.int_data.data.extend(rng.integers(-100, 100, n).tolist())
    elif t == DataType.Bool:
        fd.scalars.bool_data.data.extend((rng.random(n) > 0.5).tolist())
    elif t == DataType.Float:
        fd.scalars.float_data.data.extend(rng.random(n, dtype=np.float32))
    elif t == DataType.Double:
        fd.scalars.double_data.data.extend(rng.random(n))
    elif t == DataType.VarChar:
        fd.scalars.string_data.data.extend(f"pk-{first_pk + i}" if spec.is_primary_key else f"row {first_pk + i}"
                                           for i in range(n))
    elif t == DataType.JSON:
        fd.scalars.json_data.data.extend(f'{{"i": {first_pk + i}}}'.encode() for i in range(n))
    return fd


def _serial(method):
    """Reserve timestamps and produce under one lock: a TimeTick must never overtake a DML
    message with a smaller timestamp (the ordering Milvus guarantees on a pchannel)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper


class Proxy:
    """What the collections behind one Milvus proxy share: its producer on ``broker``, its TSO and
    the lock that keeps a TimeTick from overtaking a DML message with a smaller timestamp on a
    pchannel."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.sender = broker.sender()
        self.clock = TsoClock()
        self.lock = threading.RLock()

    def close(self) -> None:
        """Closes the producer once a message being sent (a ticker's, say) is out."""
        with self.lock:
            self.sender.close()


class MilvusProducer:
    """A proxy + rootcoord stand-in for one collection, behind ``proxy`` (shared by collections)."""

    def __init__(self, proxy: Proxy, layout: CollectionLayout, collection_id: int, collection_name: str = "",
                 seed: int = 7) -> None:
        self.layout, self.collection_id, self.collection_name = layout, collection_id, collection_name
        self.proxy = proxy
        self.producer, self.clock, self._lock = proxy.sender, proxy.clock, proxy.lock
        self.rng = np.random.default_rng(seed)
        self._pk = itertools.count(1)
        self._msg_id = itertools.count(1)
        self.bytes = 0

    @property
    def broker(self) -> Broker:
        return self.proxy.broker

    def _send(self, pchannel: str, payload: bytes) -> None:
        self.bytes += len(payload)
        self.producer.produce(pchannel, payload)

    def _base(self, msg_type: int, ts: int) -> common_pb2.MsgBase:
        return common_pb2.MsgBase(msg_type=msg_type, msgID=next(self._msg_id), timestamp=ts, sourceID=1)

    def insert_request(self, vchannel: str, segment_id: int, partition_id: int, rows: int) -> msg_pb2.InsertRequest:
        first_pk = next(self._pk)
        for _ in range(rows - 1):
            next(self._pk)
        ts0 = self.clock.next(rows)
        req = msg_pb2.InsertRequest(
            base=self._base(MsgType.Insert, ts0 + rows - 1), shardName=vchannel,
            collection_name=self.collection_name, collectionID=self.collection_id,
            partitionID=partition_id, segmentID=segment_id, timestamps=range(ts0, ts0 + rows),
            rowIDs=range(first_pk, first_pk + rows), num_rows=rows, version=msg_pb2.ColumnBased)
        req.fields_data.extend(field_data(f, rows, self.rng, first_pk) for f in self.layout.fields)
        return req

    @_serial
    def insert(self, pchannel: str, vchannel: str, segment_id: int, partition_id: int, rows: int) -> int:
        """Produce one InsertRequest; returns its first primary key."""
        req = self.insert_request(vchannel, segment_id, partition_id, rows)
        self._send(pchannel, req.SerializeToString())
        return req.rowIDs[0]

    @_serial
    def send_raw(self, pchannel: str, payload: bytes) -> None:
        self._send(pchannel, payload)

    @_serial
    def delete(self, pchannel: str, vchannel: str, partition_id: int, pks: list) -> None:
        ts0 = self.clock.next(len(pks))
        ids = schema_pb2.IDs()
        if self.layout.primary_key.data_type == DataType.Int64:
            ids.int_id.data.extend(pks)
        else:
            ids.str_id.data.extend(pks)
        req = msg_pb2.DeleteRequest(base=self._base(MsgType.Delete, ts0), shardName=vchannel,
                                    collectionID=self.collection_id, partitionID=partition_id,
                                    timestamps=range(ts0, ts0 + len(pks)), num_rows=len(pks), primary_keys=ids)
        self._send(pchannel, req.SerializeToString())

    @_serial
    def tick(self, pchannel: str) -> int:
        ts = self.clock.next()
        self._send(pchannel, msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(
            msg_type=MsgType.TimeTick, timestamp=ts, sourceID=1)).SerializeToString())
        return ts

    @_serial
    def flush(self, pchannel: str) -> None:
        ts = self.clock.next()
        self._send(pchannel, milvus_pb2.FlushRequest(base=self._base(MsgType.Flush, ts),
                                                     collection_names=[self.collection_name]).SerializeToString())

    @_serial
    def drop_partition(self, pchannel: str, partition_id: int) -> None:
        ts = self.clock.next()
        self._send(pchannel, msg_pb2.DropPartitionRequest(base=self._base(MsgType.DropPartition, ts),
                                                          collectionID=self.collection_id,
                                                          partitionID=partition_id).SerializeToString())

    @_serial
    def drop_collection(self, pchannel: str) -> None:
        ts = self.clock.next()
        self._send(pchannel, msg_pb2.DropCollectionRequest(base=self._base(MsgType.DropCollection, ts),
                                                           collectionID=self.collection_id).SerializeToString())

    def flush_producer(self, timeout: float = 30.0) -> None:
        if self.producer.flush(timeout) > 0:
            raise RuntimeError("messages still queued after flush timeout")


def ticker(producer: MilvusProducer, pchannels: list[str], stop: threading.Event,
           interval: float = 0.2) -> threading.Thread:
    """Send a TimeTick on every pchannel every ``interval`` s, as rootcoord does, until ``stop``."""
    def run() -> None:
        while not stop.wait(interval):
            for p in pchannels:
                if stop.is_set():   # the proxy may be closing
                    return
                producer.tick(p)
    t = threading.Thread(target=run, name="timetick", daemon=True)
    t.start()
    return t


