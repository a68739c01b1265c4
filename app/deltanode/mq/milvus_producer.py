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
from ..wire.schema import VALUE_SLOTS, VECTORS, CollectionLayout, DataType, FieldSpec
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


_SLOTS = {**VALUE_SLOTS, DataType.JSON: "json_data"}     # the ScalarField member of each type
_ZEROS = {DataType.Bool: False, DataType.VarChar: "", DataType.JSON: b""}   # a null's slot (else 0)
_SPARSE_ENTRY = np.dtype([("index", "<u4"), ("value", "<f4")])
_NULL_SHARE = 0.25   # of the rows of a nullable field


def field_data(spec: FieldSpec, n: int, rng: np.random.Generator, first_pk: int) -> schema_pb2.FieldData:
    """``n`` rows of ``spec``'s field as Milvus's proxy sends them; a nullable field gets some nulls,
    in Milvus 2.5's full form (a zero value in the slot of a null, ``valid_data`` one bool a row)."""
    fd = schema_pb2.FieldData(type=spec.data_type, field_name=spec.name, field_id=spec.field_id,
                              is_dynamic=spec.is_dynamic)
    if spec.data_type in VECTORS:
        _vectors(fd.vectors, spec, n, rng)
        return fd
    valid = (rng.random(n) >= _NULL_SHARE).tolist() if spec.nullable else None
    if spec.data_type == DataType.Array:
        _arrays(fd.scalars.array_data, spec, n, rng, valid)
    else:
        values = _scalars(spec, n, rng, first_pk)
        if valid is not None:
            zero = _ZEROS.get(spec.data_type, 0)
            values = [v if ok else zero for v, ok in zip(values, valid)]
        getattr(fd.scalars, _SLOTS[spec.data_type]).data.extend(values)
    if valid is not None:
        fd.valid_data.extend(valid)
    return fd


def _scalars(spec: FieldSpec, n: int, rng: np.random.Generator, first_pk: int) -> list:
    t = spec.data_type
    if spec.is_primary_key:
        return list(range(first_pk, first_pk + n)) if t == DataType.Int64 else [f"pk-{first_pk + i}" for i in range(n)]
    if t == DataType.VarChar:
        return [f"row {first_pk + i}" for i in range(n)]
    if t == DataType.JSON:
        key = "extra" if spec.is_dynamic else "i"
        return [f'{{"{key}": {first_pk + i}}}'.encode() for i in range(n)]
    return _random_values(t, n, rng)


def _random_values(t: int, n: int, rng: np.random.Generator) -> list:
    """``n`` random values of the scalar type ``t`` (a field's or an Array's elements)."""
    if t == DataType.Int64:
        return rng.integers(0, 1 << 40, n).tolist()
    if t in (DataType.Int8, DataType.Int16, DataType.Int32):
        return rng.integers(-100, 100, n).tolist()
    if t == DataType.Bool:
        return (rng.random(n) > 0.5).tolist()
    if t == DataType.Float:
        return rng.random(n, dtype=np.float32).tolist()
    if t == DataType.Double:
        return rng.random(n).tolist()
    return [f"e{i}" for i in rng.integers(0, 1000, n)]    # VarChar elements


def _arrays(out: schema_pb2.ArrayArray, spec: FieldSpec, n: int, rng: np.random.Generator,
            valid: list[bool] | None) -> None:
    """Rows of 0 to 5 elements (fewer if max_capacity says so); a null row is an empty one."""
    out.element_type = spec.element_type
    slot = VALUE_SLOTS[spec.element_type]
    lengths = rng.integers(0, min(spec.max_capacity or 5, 5) + 1, n)
    if valid is not None:
        lengths[~np.asarray(valid)] = 0
    values = _random_values(spec.element_type, int(lengths.sum()), rng)
    start = 0
    for length in lengths.tolist():
        row = out.data.add()
        getattr(row, slot).data.extend(values[start:start + length])
        start += length


def _vectors(v: schema_pb2.VectorField, spec: FieldSpec, n: int, rng: np.random.Generator) -> None:
    t = spec.data_type
    v.dim = spec.dim
    if t == DataType.FloatVector:
        v.float_vector.data.extend(rng.random(n * spec.dim, dtype=np.float32))
    elif t == DataType.BinaryVector:
        v.binary_vector = rng.bytes(n * spec.dim // 8)
    elif t == DataType.Float16Vector:
        v.float16_vector = rng.random(n * spec.dim).astype(np.float16).tobytes()
    elif t == DataType.BFloat16Vector:   # the high half of each float32
        v.bfloat16_vector = (rng.random(n * spec.dim, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        _sparse_rows(v, n, rng)


def _sparse_rows(v: schema_pb2.VectorField, n: int, rng: np.random.Generator) -> None:
    """Rows of 1 to 8 entries with increasing indices below 1,000; ``dim`` is the batch's largest."""
    sparse = v.sparse_float_vector
    for _ in range(n):
        entries = np.empty(rng.integers(1, 9), dtype=_SPARSE_ENTRY)
        entries["index"] = np.sort(rng.choice(1000, entries.size, replace=False))
        entries["value"] = rng.random(entries.size, dtype=np.float32)
        sparse.contents.append(entries.tobytes())
        sparse.dim = max(sparse.dim, int(entries["index"][-1]) + 1)
    v.dim = sparse.dim


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

    def insert_request(self, vchannel: str, segment_id: int, partition_id: int, rows: int,
                       first_pk: int | None = None, ts0: int | None = None) -> msg_pb2.InsertRequest:
        """``first_pk``: rows with keys from it on (an upsert's), else new keys; ``ts0``: the
        first row's ts, else new ones."""
        if first_pk is None:
            first_pk = next(self._pk)
            for _ in range(rows - 1):
                next(self._pk)
        if ts0 is None:
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
    def upsert(self, pchannel: str, vchannel: str, segment_id: int, partition_id: int, first_pk: int,
               rows: int) -> None:
        """Milvus's upsert of keys ``first_pk``..: an Insert of new rows, then a Delete of the same
        keys with the same timestamps (it removes the older rows, not these: docs/milvus-facts.md §8)."""
        ts0 = self.clock.next(rows)
        insert = self.insert_request(vchannel, segment_id, partition_id, rows, first_pk, ts0)
        pk = self.layout.primary_key
        keys = next(fd for fd in insert.fields_data if fd.field_id == pk.field_id).scalars
        self._send(pchannel, insert.SerializeToString())
        self._send(pchannel, self._delete_request(vchannel, partition_id, list(
            keys.long_data.data if pk.data_type == DataType.Int64 else keys.string_data.data), ts0).SerializeToString())

    @_serial
    def send_raw(self, pchannel: str, payload: bytes) -> None:
        self._send(pchannel, payload)

    @_serial
    def delete(self, pchannel: str, vchannel: str, partition_id: int, pks: list) -> None:
        self._send(pchannel, self._delete_request(vchannel, partition_id, pks,
                                                  self.clock.next(len(pks))).SerializeToString())

    def _delete_request(self, vchannel: str, partition_id: int, pks: list, ts0: int) -> msg_pb2.DeleteRequest:
        ids = schema_pb2.IDs()
        if self.layout.primary_key.data_type == DataType.Int64:
            ids.int_id.data.extend(pks)
        else:
            ids.str_id.data.extend(pks)
        return msg_pb2.DeleteRequest(base=self._base(MsgType.Delete, ts0), shardName=vchannel,
                                     collectionID=self.collection_id, partitionID=partition_id,
                                     timestamps=range(ts0, ts0 + len(pks)), num_rows=len(pks), primary_keys=ids)

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


