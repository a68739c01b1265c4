"""Every Delta reader sees a collection as Milvus returns it: Spark with delta-spark, DuckDB's Delta
extension, Polars and deltalake's SQL read the insert_log after inserts, deletes (in one partition,
in all of them, in a partition that does not hold the key), upserts and a dropped partition, with the DataNode
SIGKILLed between its delta_log and insert_log commits in between, and each gets exactly the
current state: the rows the test's own model keeps, with the upserted versions, and the same as
``storage.current_state`` computes from the tables."""

from __future__ import annotations

import pytest

from deltanode.state.current_state import current_rows

from ..delta_readers import READERS, by_spark
from .support import settled_watermark
from .test_crash_recovery import restart, run_node

pytestmark = pytest.mark.spark
PARTITIONS = (11, 12)


class Model:
    """What the collection holds, by Milvus's rules: key -> (shard, partition, ts of its version)."""

    def __init__(self, coll) -> None:
        self.coll, self.rows = coll, {}
        self.segment = 100

    def insert(self, shard: int, partition: int, n: int) -> list[int]:
        self.segment += 1
        first = self.coll.producer.insert(self.coll.pchannels[shard], self.coll.vchannels[shard], self.segment,
                                          partition, n)
        self.rows.update((pk, (shard, partition)) for pk in range(first, first + n))
        return list(range(first, first + n))

    def delete(self, pks: list[int], partition: int | None) -> None:
        """Each key's delete to its own shard, as Milvus's proxy routes it; ``partition`` None: all (-1)."""
        for shard in range(len(self.coll.vchannels)):
            mine = [pk for pk in pks if self.rows.get(pk, (shard + 1,))[0] == shard]
            if mine:
                self.coll.producer.delete(self.coll.pchannels[shard], self.coll.vchannels[shard],
                                          -1 if partition is None else partition, mine)
            for pk in mine:
                if partition is None or self.rows[pk][1] == partition:
                    del self.rows[pk]

    def upsert(self, first: int, n: int) -> None:
        shard, partition = self.rows[first]
        self.segment += 1
        self.coll.producer.upsert(self.coll.pchannels[shard], self.coll.vchannels[shard], self.segment, partition,
                                  first, n)

    def drop_partition(self, partition: int) -> None:
        for p in self.coll.pchannels:
            self.coll.producer.drop_partition(p, partition)
        self.rows = {pk: where for pk, where in self.rows.items() if where[1] != partition}

    def settle(self) -> dict[str, int]:
        return {v: settled_watermark(self.coll, p) for p, v in zip(self.coll.pchannels, self.coll.vchannels)}


def test_every_reader_sees_the_current_state_through_a_sigkill(spark, make_collection, pipelines, tmp_path):
    coll = make_collection(shards=2)
    model = Model(coll)
    keys = {(s, p): model.insert(s, p, 100) for s in (0, 1) for p in PARTITIONS}
    model.delete(keys[(0, 11)][:10], 11)                          # in their partition
    model.delete(keys[(1, 12)][:10] + keys[(0, 12)][10:15], None)  # everywhere (-1)
    model.delete(keys[(1, 11)][20:25], 12)                        # a partition that does not hold them: kept
    model.upsert(keys[(0, 11)][50], 10)
    crashed = run_node([coll], tmp_path, model.settle(), crash="after_side_commits:2", max_messages=4)
    assert crashed.returncode < 0, f"the node was not killed: rc={crashed.returncode}\n{crashed.stderr[-3000:]}"

    model.upsert(keys[(1, 12)][40], 5)
    model.insert(0, 11, 50)
    model.delete(keys[(0, 11)][50:55] + keys[(1, 11)][60:70], None)   # upserted rows among them
    model.drop_partition(12)
    restart(pipelines, [coll], model.settle(), max_messages=4)

    uri = coll.storage.insert_log(coll.collection_id)
    reference = current_rows(coll.storage, coll.collection_id, "pk")
    expected = sorted(zip(reference.column("pk").to_pylist(), reference.column("_ts").to_pylist()))
    assert [pk for pk, _ in expected] == sorted(model.rows)
    upserted = {pk: ts for pk, ts in expected if keys[(0, 11)][55] <= pk < keys[(0, 11)][60]}
    versions: dict[int, list[int]] = {}
    for r in coll.insert_rows():
        versions.setdefault(r["pk"], []).append(r["_ts"])
    assert len(upserted) == 5 and all(len(versions[pk]) == 2 and ts == max(versions[pk]) for pk, ts in upserted.items())
    for name, read in {**READERS, "spark": lambda uri, columns: by_spark(spark, uri, columns)}.items():
        table = read(uri, ["pk", "_ts"])
        assert sorted(zip(table.column("pk").to_pylist(), table.column("_ts").to_pylist())) == expected, name
