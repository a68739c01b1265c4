"""What a nemesis run must find in Delta, read back from the broker after the run: every
InsertRequest's rows as (key, ts), every DeleteRequest's keys as (key, ts), per collection; and
the current state those imply by Milvus's rules (a delete at ts T removes the key's rows with
ts < T; a query returns a key's newest standing row). Runs in the nemesis process."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from deltanode.mq.broker import Broker, BrokerError, connect
from deltanode.mq.types import Gap, OffsetRange
from deltanode.wire.milvus_proto import common_pb2, msg_pb2

MsgType = common_pb2.MsgType


@dataclass
class CollectionLedger:
    inserts: list[tuple[int, int]] = field(default_factory=list)   # (pk, ts), as many times as on the broker
    deletes: list[tuple[int, int]] = field(default_factory=list)

    def current(self) -> collections.Counter:
        """(pk, ts) of the rows a Milvus query returns: each key's newest row no delete removed."""
        latest_delete: dict[int, int] = {}
        for pk, ts in self.deletes:
            latest_delete[pk] = max(ts, latest_delete.get(pk, 0))
        newest: dict[int, int] = {}
        for pk, ts in self.inserts:
            if ts >= latest_delete.get(pk, 0):
                newest[pk] = max(ts, newest.get(pk, 0))
        return collections.Counter(newest.items())


def highs(broker: Broker, pchannels: list[str]) -> dict[str, int]:
    """Each pchannel's high watermark: the position past its last message."""
    marks = connect(broker).watermarks()
    try:
        return {p: marks.high(p) for p in pchannels}
    finally:
        marks.close()


def read_back(broker: Broker, pchannels: list[str], collection_ids: set[int]) -> dict[int, CollectionLedger]:
    """Every message of ``pchannels`` (whole topics), decoded into each collection's ledger."""
    backend = connect(broker)
    marks = backend.watermarks()
    try:
        ranges = [OffsetRange(p, 0, marks.first(p), marks.high(p)) for p in pchannels]
    finally:
        marks.close()
    out = {cid: CollectionLedger() for cid in collection_ids}
    for _, chunk in backend.read_ranges([r for r in ranges if r.end > r.start]):
        if isinstance(chunk, BrokerError):
            raise chunk
        if isinstance(chunk, Gap):
            continue
        for _, payload, _ in chunk:
            if payload is not None:
                _decode(payload, out)
    return out


def _decode(payload: bytes, out: dict[int, CollectionLedger]) -> None:
    kind = msg_pb2.TimeTickMsg.FromString(payload).base.msg_type   # every message's field 1 is its MsgBase
    if kind == MsgType.Insert:
        req = msg_pb2.InsertRequest.FromString(payload)
        if req.collectionID in out:
            out[req.collectionID].inserts.extend(zip(req.rowIDs, req.timestamps))
    elif kind == MsgType.Delete:
        req = msg_pb2.DeleteRequest.FromString(payload)
        if req.collectionID in out:
            out[req.collectionID].deletes.extend(zip(req.primary_keys.int_id.data, req.timestamps))
