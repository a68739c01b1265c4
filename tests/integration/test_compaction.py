"""Compaction racing the shared pipeline's commits: traffic on 4 vchannels (two collections of two
shards) with deletes (marked as deletion vectors by the pipeline) and a dropped partition, the
compactor running every 2 seconds, until it has rewritten segments both before the drop and
through several rounds after it. Every row not deleted exactly once,
every deleted row gone from what readers see (compaction drops deleted rows from the files,
keeps or carries over the others' marks), deletes intact, segment meta true, the file count down."""

from __future__ import annotations

import collections
import copy
import threading
import time

import pyarrow as pa
import pytest

from deltanode.config.sections.pipeline import CompactionSettings
from deltanode.delta.layout import segment_of
from deltanode.delta.tables import open_table, read_table

from .support import data_files_added, settled_watermark, wait_until

pytestmark = pytest.mark.spark
DROP_AT = 120              # the first traffic round in which collection 0 may drop partition 3
REWRITES_AFTER_DROP = 12   # segment rewrites committed after the drop while traffic goes on (2-3 rounds)
COMPACTION = CompactionSettings(interval=2.0, min_files=4, target_bytes=64 << 20, retention=0.0)


def segment_files(coll) -> dict[int, int]:
    table = open_table(coll.storage.insert_log(coll.collection_id))
    paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    return dict(collections.Counter(segment_of(p)[1] for p in paths))


def test_compaction_racing_four_vchannels_keeps_every_row_once(pipelines, make_collection):
    colls = [make_collection(shards=2), make_collection(shards=2)]
    pipe = pipelines(trigger_interval=0.2, compaction=COMPACTION)
    for coll in colls:
        coll.watch(pipe)
    produced: dict[int, list[int]] = {c.collection_id: [] for c in colls}
    deleted: dict[int, list[int]] = {c.collection_id: [] for c in colls}
    inserted: dict[int, collections.Counter] = {c.collection_id: collections.Counter() for c in colls}   # by segment
    dropped_partition: dict[int, int] = {}
    rewrites_at_drop: list[int] = []   # the compactor's rewrites committed when the partition dropped
    stop = threading.Event()

    def traffic() -> None:
        n = 0
        while not stop.is_set():
            for coll in colls:
                for k, (p, v) in enumerate(zip(coll.pchannels, coll.vchannels)):
                    # two segments per vchannel; collection 0 also writes a partition it drops later
                    partition = 3 if coll is colls[0] and n % 4 == 3 and n < 100 else 1
                    segment = coll.collection_id * 100 + k * 10 + (n % 2) + (5 if partition == 3 else 0)
                    first = coll.producer.insert(p, v, segment_id=segment, partition_id=partition, rows=20)
                    inserted[coll.collection_id][segment] += 20
                    if partition == 1:
                        produced[coll.collection_id].extend(range(first, first + 20))
                    if n % 7 == 6 and partition == 1:
                        coll.producer.delete(p, v, partition, [first])
                        deleted[coll.collection_id].append(first)
            # Mid-traffic, once compaction has committed a rewrite (a loaded machine's first round
            # comes later): collection 0 drops partition 3 (its rows go, compaction or not).
            if not dropped_partition and n >= DROP_AT and pipe.compactor.totals.rewrites > 0:
                for p in colls[0].pchannels:
                    colls[0].producer.drop_partition(p, 3)
                dropped_partition[colls[0].collection_id] = 3
                rewrites_at_drop.append(pipe.compactor.totals.rewrites)
            n += 1
            time.sleep(0.1)

    producer = threading.Thread(target=traffic, daemon=True)
    producer.start()
    try:   # the traffic goes on until compaction has raced it on both sides of the drop
        wait_until(lambda: rewrites_at_drop and pipe.compactor.totals.rewrites - rewrites_at_drop[0]
                   >= REWRITES_AFTER_DROP, 120, f"{REWRITES_AFTER_DROP} rewrites committed after the drop")
        assert producer.is_alive(), "the traffic stopped before compaction raced it"
    finally:
        stop.set()
        producer.join(10)
    assert rewrites_at_drop[0] > 0, "no rewrite committed before the drop"
    for coll in colls:
        coll.producer.flush_producer()
        targets = {v: settled_watermark(coll, p) for p, v in zip(coll.pchannels, coll.vchannels)}
        wait_until(lambda coll=coll, targets=targets: all(coll.committed_offset(v) >= t for v, t in targets.items()),
                   90, "every vchannel to commit the traffic")
    totals = copy.copy(pipe.compactor.totals)
    assert totals.rewrites > 0 and totals.failed == 0, totals
    before = {c.collection_id: sum(segment_files(c).values()) for c in colls}
    pipe.compactor.run_once(every_collection=True)   # what is left after the traffic
    for coll in colls:
        stored = [r["pk"] for r in coll.insert_rows()]      # what the files hold, deleted rows included
        pks = read_table(coll.storage, coll.storage.insert_log(coll.collection_id), ["pk"]).column("pk").to_pylist()
        dupes = [pk for pk, n in collections.Counter(stored).items() if n > 1]
        assert not dupes, f"{len(dupes)} rows twice, e.g. {dupes[:5]}"
        expected = set(produced[coll.collection_id]) - set(deleted[coll.collection_id])
        assert sorted(pks) == sorted(expected), \
            f"{len(expected - set(pks))} rows lost, {len(set(pks) - expected)} deleted rows back"
        assert expected <= set(stored) <= set(produced[coll.collection_id])
        assert len(stored) < len(produced[coll.collection_id]), "no deleted row left the files"
        deletes = read_table(coll.storage, coll.storage.delta_log(coll.collection_id)).column("pk").to_pylist()
        assert sorted(deletes) == sorted(deleted[coll.collection_id])
        per_segment = segment_files(coll)
        rows = inserted[coll.collection_id]      # the meta counts rows inserted: compaction's drops change none
        for v in coll.vchannels:
            for seg in coll.state(v).segments.values():
                if seg.state != "Dropped":
                    assert seg.num_rows == rows[seg.segment_id], f"segment {seg.segment_id} meta"
        assert all(n < COMPACTION.min_files for n in per_segment.values()), per_segment
        print(f"collection {coll.collection_id}: {len(pks)} rows, {len(deletes)} deletes, "
              f"{len(produced[coll.collection_id]) - len(stored)} deleted rows compacted away; "
              f"{data_files_added(coll.storage.insert_log(coll.collection_id))} binlog files committed, "
              f"{before[coll.collection_id]} left before the last round, {sum(per_segment.values())} after "
              f"({len(per_segment)} segments); {totals.rewrites} rewrites, "
              f"a commit held the commit lock {totals.locked_s * 1000:.1f} ms at most")
