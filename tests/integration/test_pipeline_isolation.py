"""One shared pipeline, many vchannels: one vchannel leaving, failing or catching up never stops the others."""

from __future__ import annotations

import time

import pytest

from deltanode.etcd import keys
from deltanode.etcd.fence import OwnershipFence
from deltanode.etcd.session import Session
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState, VchannelInfo

from .support import ALL_BROKERS, settled_watermark, wait_until

pytestmark = pytest.mark.spark


def produce(coll, rounds: int, rows: int = 10) -> dict[str, list[int]]:
    """``rounds`` inserts per vchannel of ``coll``; returns the primary keys per vchannel."""
    pks: dict[str, list[int]] = {v: [] for v in coll.vchannels}
    for _ in range(rounds):
        for k, (p, v) in enumerate(zip(coll.pchannels, coll.vchannels)):
            first = coll.producer.insert(p, v, segment_id=coll.collection_id * 10 + k, partition_id=1, rows=rows)
            pks[v] += range(first, first + rows)
    coll.producer.flush_producer()
    return pks


def pks_of(coll, vchannel: str) -> list[int]:
    shard = coll.vchannels.index(vchannel)
    return sorted(r["pk"] for r in coll.insert_rows() if r["_segment_id"] == coll.collection_id * 10 + shard)


def all_committed(coll, vchannels=None):
    targets = {v: settled_watermark(coll, p) for p, v in zip(coll.pchannels, coll.vchannels)}
    return lambda: all(coll.committed_offset(v) >= targets[v] for v in (vchannels or coll.vchannels))


@ALL_BROKERS
def test_a_released_vchannel_leaves_alone_and_resumes_from_delta(pipelines, make_collection):
    a = make_collection(shards=2)
    b = make_collection(shards=2, ticking=False, pchannels=a.pchannels)
    pipe = pipelines()
    a.watch(pipe)
    b.watch(pipe)
    sent = {**produce(a, 5), **produce(b, 5)}
    wait_until(all_committed(b), 60, "every vchannel to commit")
    gone = b.vchannels[0]
    pipe.remove(gone)
    stopped_at = b.committed_offset(gone)
    for v, pks in {**produce(a, 5), **produce(b, 5)}.items():
        sent[v] += pks
    wait_until(all_committed(a), 60, "the remaining vchannels to commit")
    wait_until(all_committed(b, [b.vchannels[1]]), 60, "the other shard of the released one to commit")
    assert b.committed_offset(gone) == stopped_at and gone not in pipe.vchannels()
    assert len(pks_of(b, gone)) < len(sent[gone])
    b.watch(pipe, gone)                         # watched again: resumes at Delta's offset
    wait_until(all_committed(b), 60, "the re-watched vchannel to catch up")
    for coll in (a, b):
        for v in coll.vchannels:
            assert pks_of(coll, v) == sorted(sent[v]), v


def test_a_vchannel_at_a_position_the_broker_lost_fails_alone(pipelines, make_collection):
    coll = make_collection(shards=2, shared_pchannel=True)
    pipe = pipelines()
    coll.watch(pipe, coll.vchannels[0])
    pipe.add(VchannelInfo(collectionID=coll.collection_id, channelName=coll.vchannels[1],
                          seek_position={"msgID": (10**6).to_bytes(8, "little")}), coll.schema)
    sent = produce(coll, 5)
    wait_until(all_committed(coll, coll.vchannels[:1]), 60, "the healthy vchannel to commit")
    assert pks_of(coll, coll.vchannels[0]) == sorted(sent[coll.vchannels[0]])
    broken = {s.vchannel: s for s in pipe.snapshots()}[coll.vchannels[1]]
    assert broken.status == "failed" and "the broker lost data" in broken.last_error


def test_a_vchannel_whose_fence_fails_stops_alone(pipelines, make_collection, client, etcd_server, etcd_root):
    with Session(client, etcd_root, ttl=10) as session:
        colls = [make_collection(shards=2)]
        colls.append(make_collection(shards=2, ticking=False, pchannels=colls[0].pchannels))
        for coll in colls:
            for v in coll.vchannels:
                info = ChannelWatchInfo(vchan=VchannelInfo(collectionID=coll.collection_id, channelName=v),
                                        state=ChannelWatchState.WatchSuccess)
                client.put(keys.channel_watch_key(etcd_root, session.server_id, v), info.SerializeToString())
        pipe = pipelines(fence=OwnershipFence(etcd_server.endpoint, etcd_root, session.server_id))
        for coll in colls:
            coll.watch(pipe)
        sent = {v: pks for coll in colls for v, pks in produce(coll, 3).items()}
        for coll in colls:
            wait_until(all_committed(coll), 60, "every vchannel to commit")
        # The coordinator takes one vchannel away (ToRelease) before this node has released it.
        taken = colls[1].vchannels[1]
        client.put(keys.channel_watch_key(etcd_root, session.server_id, taken), ChannelWatchInfo(
            vchan=VchannelInfo(collectionID=colls[1].collection_id, channelName=taken),
            state=ChannelWatchState.ToRelease).SerializeToString())
        stopped_at = colls[1].committed_offset(taken)
        for coll in colls:
            for v, pks in produce(coll, 3).items():
                sent[v] += pks
        wait_until(all_committed(colls[0]), 60, "the other collection to commit")
        wait_until(all_committed(colls[1], colls[1].vchannels[:1]), 60, "the sibling shard to commit")
        status = {s.vchannel: s for s in pipe.snapshots()}[taken]
        assert status.status == "failed" and "OwnershipLost" in status.last_error and "ToRelease" in status.last_error
        assert colls[1].committed_offset(taken) == stopped_at
        for coll in colls:
            for v in coll.vchannels:
                if v != taken:
                    assert pks_of(coll, v) == sorted(sent[v]), v


def test_a_vchannel_watched_far_behind_catches_up_without_stalling_the_others(pipelines, make_collection):
    live = make_collection()
    p = live.pchannels[0]
    late = make_collection(pchannels=[p], ticking=False, schema={"fields": [
        {"name": "pk", "data_type": "Int64", "is_primary_key": True},
        {"name": "vec", "data_type": "FloatVector", "dim": 256}]})
    backlog = produce(late, 300, rows=50)[late.vchannels[0]]       # 300 x ~50 kB on the shared pchannel
    head = settled_watermark(live, p)
    pipe = pipelines(catchup_bytes=256 << 10)                        # the late one reads ~5 messages a cycle
    live.watch(pipe, seek_offset=head)
    late.watch(pipe, seek_offset=0)
    waits = []
    while late.committed_offset(late.vchannels[0]) < head - 50:    # measured while it is still far behind
        sent = produce(live, 1)[live.vchannels[0]]
        started = time.monotonic()
        wait_until(lambda sent=sent: set(sent) <= set(pks_of(live, live.vchannels[0])), 30, "a live insert to commit",
                   0.05)
        waits.append(time.monotonic() - started)
    wait_until(lambda: len(late.insert_rows()) >= len(backlog), 120, "the late vchannel to catch up")
    print(f"{len(waits)} live inserts -> committed while the late vchannel caught up: max {max(waits):.2f} s, "
          f"median {sorted(waits)[len(waits) // 2]:.2f} s")
    assert len(waits) >= 5, "the late vchannel caught up too soon to measure the others"
    assert max(waits) < 3.0
    assert pks_of(late, late.vchannels[0]) == sorted(backlog)


def test_a_vchannel_with_no_message_after_its_start_stays_healthy(pipelines, make_collection):
    """An empty cycle is a no-op: no failure, no backoff, and the first message is committed as soon as it comes."""
    coll = make_collection(ticking=False)
    pipe = pipelines()
    coll.watch(pipe)
    time.sleep(2)   # ten cycles with nothing to read on a pchannel without even a tick
    status = pipe.snapshots()[0]
    assert (status.status, status.failures, status.last_error) == ("running", 0, "")
    sent = produce(coll, 1)[coll.vchannels[0]]
    coll.producer.tick(coll.pchannels[0])   # the broker shows the last batch once another follows
    coll.producer.flush_producer()
    wait_until(lambda: pks_of(coll, coll.vchannels[0]) == sorted(sent), 30, "the first message to commit")
    assert pipe.snapshots()[0].failures == 0


def test_a_vchannel_whose_topic_was_created_again_is_not_read_from_its_old_offset(pipelines, make_collection, mq):
    """Kafka (topic ids, KIP-516): the topic deleted and created again, then grown past the
    checkpoint, is refused at the next load instead of read from the old offset (which would skip
    the new topic's first messages)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from deltanode.vchannel.start_state import TopicRecreated

    coll = make_collection(shards=1, ticking=False)
    (p,), (v,) = coll.pchannels, coll.vchannels
    pipe = pipelines()
    coll.watch(pipe)
    sent = produce(coll, 5)[v]
    coll.producer.tick(p)
    coll.producer.flush_producer()
    wait_until(all_committed(coll), 60, "the vchannel to commit")
    checkpoint = coll.committed_offset(v)
    pipe.remove(v)
    admin = AdminClient({"bootstrap.servers": mq.address})
    admin.delete_topics([p])[p].result(30)
    wait_until(lambda: p not in admin.list_topics(timeout=10).topics, 30, "the topic to be deleted")
    admin.create_topics([NewTopic(p, 1, 1)])[p].result(30)
    produce(coll, 2 * checkpoint)               # the new topic grows past the old checkpoint
    assert settled_watermark(coll, p) > checkpoint
    with pytest.raises(TopicRecreated, match="deleted and created again"):
        coll.watch(pipe)
    assert v not in pipe.vchannels() and coll.committed_offset(v) == checkpoint
    assert pks_of(coll, v) == sorted(sent)
