"""DeltaNode's own catalog: ``admin create-collection --count`` creates many collections in one go
(real etcd, real brokers), each with its start position on every pchannel it uses."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from deltanode.admin import commands
from deltanode.datacoord.catalog import list_collections
from deltanode.etcd.client import EtcdClient
from deltanode.mq.broker import Broker, OffsetRange
from deltanode.wire.milvus_proto import msg_pb2

from .support import ALL_BROKERS, SCHEMA, high_watermark


def _create(conf, tmp_path, capsys, name: str, count: int, shards: int = 2) -> tuple[int, object]:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    rc = commands.create_collection(conf, argparse.Namespace(name=name, schema=str(schema), shards=shards,
                                                             count=count))
    out, err = capsys.readouterr()
    return rc, json.loads(out) if rc == 0 else err


def _create_messages(mq: Broker, pchannel: str, first: int, end: int) -> dict[int, int]:
    """Offset -> collectionID of the CreateCollection messages in [first, end) of ``pchannel``."""
    out = {}
    for _, chunk in mq.read_ranges([OffsetRange(pchannel, 0, first, end)]):
        assert isinstance(chunk, list), chunk
        for offset, value, _ in chunk:
            out[offset] = msg_pb2.CreateCollectionRequest.FromString(value).collectionID
    return out


@ALL_BROKERS
def test_a_batch_creates_every_collection_at_its_broadcast_position(conf, mq, etcd_root, tmp_path, capsys):
    rc, docs = _create(conf, tmp_path, capsys, "bulk", 300)
    assert rc == 0, docs
    assert [d["name"] for d in docs] == [f"bulk_{i}" for i in range(300)]
    with EtcdClient(conf.get("etcd.endpoints")) as client:
        records = {r.name: r for r in list_collections(client, etcd_root)}
    assert len(records) == 300 and len({r.collection_id for r in records.values()}) == 300
    usage = Counter(p for r in records.values() for p in r.pchannels)
    assert len(usage) == conf.get("mq.pchannel.count") and max(usage.values()) - min(usage.values()) <= 1
    for r in records.values():
        assert r.shards == 2 and len(set(r.pchannels)) == 2 and len(r.vchannels) == 2
        assert sorted(r.start_offsets) == sorted(r.pchannels)
    # Each start position holds that collection's CreateCollection: its vchannels start right after it,
    # and the broker's high watermark already says so (one short of the last batch would make its
    # vchannels start past the watermark, which reads as lost data).
    for pchannel in usage:
        offsets = {r.start_offsets[pchannel]: r.collection_id for r in records.values() if pchannel in r.pchannels}
        assert high_watermark(mq, pchannel) == max(offsets) + 1
        assert _create_messages(mq, pchannel, min(offsets), max(offsets) + 1) == offsets


def test_a_batch_with_a_taken_name_creates_nothing(conf, etcd_root, tmp_path, capsys):
    assert _create(conf, tmp_path, capsys, "first", 1)[0] == 0
    rc, err = _create(conf, tmp_path, capsys, "first", 1)
    assert rc == 1 and "a collection named 'first' already exists" in err
    assert _create(conf, tmp_path, capsys, "many", 3)[0] == 0
    rc, err = _create(conf, tmp_path, capsys, "many", 5)   # many_0 .. many_2 are taken
    assert rc == 1 and "'many_0' already exists" in err
    rc, err = _create(conf, tmp_path, capsys, "bad", 0)
    assert rc == 1 and "--count must be at least 1" in err
    with EtcdClient(conf.get("etcd.endpoints")) as client:
        assert sorted(r.name for r in list_collections(client, etcd_root)) == ["first", "many_0", "many_1", "many_2"]
