"""storage.root on an S3-compatible object store (moto on loopback, one request at a time: see
s3_server.py): the commit protocol's compare-and-swap through conditional PUTs, and the shared
pipeline writing binlogs from its tasks and committing from the driver, exactly once across a restart."""

from __future__ import annotations

import collections

import pyarrow as pa
import pytest

from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import open_table, read_table

from ..races import race_for_one_step
from .support import fresh_root, settled_watermark, wait_until

PK_SCHEMA = pa.schema([("pk", pa.int64())])


def test_the_commit_log_on_s3_is_a_compare_and_swap(s3):
    storage = StorageLayout(fresh_root("cas"), s3)
    uri = storage.insert_log(1)
    first = DeltaLog(uri, PK_SCHEMA, s3)
    first.commit(txns={"a": 2}, expected={"a": None}, info={})
    racers = [DeltaLog(uri, options=s3) for _ in range(4)]   # none sees the others' commits
    assert race_for_one_step(racers, "a", 2) == ["refused"] * 3 + ["won"]
    table = open_table(uri, storage.delta_options(uri))
    assert table.version() == 2 and table.transaction_version("a") == 3
    other = DeltaLog(uri, options=s3)
    other.commit(txns={"b": 1}, expected={"b": None}, info={})   # another app id lands on the next version
    assert other.version == 3


@pytest.mark.spark
def test_the_shared_pipeline_persists_to_s3_exactly_once_across_a_restart(spark, mq, make_collection, s3):
    from deltanode.config.sections.pipeline import Limits, PipelineSettings, TriggerSettings
    from deltanode.pipeline.pipeline import Pipeline

    storage = StorageLayout(fresh_root("pipeline"), s3)
    coll = make_collection(shards=2)
    produced = []

    def produce(rounds: int) -> None:
        for _ in range(rounds):
            for k, (p, v) in enumerate(zip(coll.pchannels, coll.vchannels)):
                first = coll.producer.insert(p, v, segment_id=40 + k, partition_id=1, rows=50)
                produced.extend(range(first, first + 50))
        coll.producer.flush_producer()

    def committed(vchannel: str) -> int:
        table = open_table(storage.insert_log(coll.collection_id), storage.delta_options(storage.insert_log(
            coll.collection_id)))
        return (table.transaction_version(vchannel) or 0) if table else 0

    def run_until_committed() -> None:
        pipe = Pipeline(spark.sparkContext, storage, mq,
                        PipelineSettings(limits=Limits(max_messages=6), trigger=TriggerSettings(interval=0.2))).start()
        try:
            for v in coll.vchannels:
                coll.watch(pipe, v)
            targets = {v: settled_watermark(coll, p) for p, v in zip(coll.pchannels, coll.vchannels)}
            wait_until(lambda: all(committed(v) >= targets[v] for v in coll.vchannels), 120,
                       "every vchannel to commit to S3")
        finally:
            pipe.stop()

    produce(10)
    run_until_committed()
    produce(10)   # while no pipeline runs: the next one resumes from the checkpoints on S3
    run_until_committed()
    uri = storage.insert_log(coll.collection_id)
    pks = read_table(storage, uri, include_deleted=True).column("pk").to_pylist()
    dupes = [pk for pk, n in collections.Counter(pks).items() if n > 1]
    print(f"S3 (moto): produced {len(produced)}, in Delta {len(pks)}, {len(dupes)} duplicated")
    assert not dupes and sorted(pks) == sorted(produced)
    keys = [o["Key"] for page in s3.boto3().get_paginator("list_objects_v2").paginate(
        Bucket="deltanode", Prefix=uri.split("/", 3)[3]) for o in page.get("Contents", [])]
    assert any(k.endswith(".parquet") and "/1/4" in k for k in keys)        # binlogs under {partition}/{segment}/
    assert any(k.endswith("_delta_log/00000000000000000001.json") for k in keys)
