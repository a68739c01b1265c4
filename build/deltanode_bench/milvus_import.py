"""How fast a mirror imports what a real Milvus 2.3.5 persisted (rows/s, MB/s of Milvus's files).

``build/bench.sh --milvus-import`` or ``python -m deltanode_bench.milvus_import --help``: starts
an embedded etcd and Apache Kafka and the Milvus 2.3.5 the tests use (``build/milvus_env.sh``),
makes a collection (Int64 key, a VarChar, a FloatVector of ``--dim``), inserts ``--rows`` rows in
``--segments`` flushed rounds and deletes ``--deleted`` of them, then imports the collection's
vchannel with DeltaNode's importer (``milvus_import.importer``: the meta read, one Spark task a
segment on ``local[2]``, the commits), timed from the first meta read to the last commit. The
import must hold every row inserted. Deletes of rows in already Flushed segments reach Milvus's
deltalogs only at its DataNode's next sync of them (``dataNode.segment.syncPeriod``, 600 s): until
then they are past Milvus's channel checkpoint, where a mirror reads them from the stream, so the
rows the import alone deleted may be fewer than Milvus's ``count(*)`` says.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .report import mb, rate, secs, table

ROOT = Path(__file__).resolve().parents[2]


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.milvus_import", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000, help="rows inserted (default 200,000)")
    p.add_argument("--segments", type=int, default=8, help="flushed rounds, a segment each (default 8)")
    p.add_argument("--dim", type=int, default=128, help="FloatVector dimension (default 128)")
    p.add_argument("--deleted", type=int, default=1000, help="rows deleted after the inserts (default 1,000)")
    p.add_argument("--batch", type=int, default=8, help="segments a Spark job reads (milvus.import.batch)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))   # the Milvus server and client the tests use
    from deltanode.etcd.client import EtcdClient
    from deltanode.standalone.kafka_server import EmbeddedKafka
    from deltanode.standalone.services import EmbeddedEtcd
    from tests.integration.milvus_client import MilvusClient
    from tests.integration.milvus_server import MilvusServer

    work = Path(tempfile.mkdtemp(prefix="deltanode-bench-import-"))
    try:
        with EmbeddedEtcd(work / "etcd") as etcd, EmbeddedKafka(work / "kafka") as kafka, \
                MilvusServer(etcd.endpoint, kafka.bootstrap_servers, work / "milvus", root_path="bench") as milvus, \
                MilvusClient(milvus.uri, timeout=600) as mc, EtcdClient(etcd.endpoint) as client:
            made = mc.create_collection("bench", [
                {"name": "id", "data_type": "Int64", "is_primary_key": True},
                {"name": "title", "data_type": "VarChar", "max_length": 64},
                {"name": "vec", "data_type": "FloatVector", "dim": args.dim}], load=False)
            per = -(-args.rows // args.segments)
            rng = np.random.default_rng(7)
            t0 = time.monotonic()
            for lo in range(0, args.rows, per):
                for start in range(lo, min(lo + per, args.rows), 5000):
                    ids = range(start, min(start + 5000, lo + per, args.rows))
                    vecs = rng.random((len(ids), args.dim), dtype=np.float32)
                    mc.insert("bench", [{"id": i, "title": f"row {i}", "vec": v.tolist()} for i, v in zip(ids, vecs)])
                mc.flush("bench")
            if args.deleted:
                step = max(1, args.rows // args.deleted)
                mc.delete("bench", f"id in {list(range(0, args.rows, step))[:args.deleted]}")
                mc.flush("bench")
            milvus_s = time.monotonic() - t0
            mc.load("bench")
            count = mc.count("bench")
            args.kafka = kafka.bootstrap_servers
            figures = _import(client, milvus, made, args)
            files = _dir_bytes(milvus.data_dir / "data" / "insert_log")
            rows, deleted, seconds, segments = figures
            print(table(["segments", "rows", "deleted by its deltalogs", "Milvus files MB", "import s", "rows/s",
                         "MB/s", "Milvus count(*)"],
                        [[segments, f"{rows:,}", f"{deleted:,}", mb(files), secs(seconds, 1), rate(rows / seconds, 0),
                          rate(files / 1e6 / seconds, 1), f"{count:,}"]]))
            print(f"  (Milvus took {milvus_s:.1f} s to take and flush the rows; dim {args.dim}, batch {args.batch}, "
                  f"{os.cpu_count()} cores)")
            return 0 if rows == args.rows else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _import(client, milvus, made: dict, args) -> tuple[int, int, float, int]:
    from pyspark.sql import SparkSession

    from deltanode.config.jvm_options import spark_defaults
    from deltanode.datacoord.milvus_catalog import MilvusCatalog
    from deltanode.delta.layout import StorageLayout
    from deltanode.milvus_import.import_progress import import_progress
    from deltanode.milvus_import.importer import MilvusSource, VchannelImporter
    from deltanode.mq.broker import Broker
    from deltanode.state.commit import CollectionCommitter, QuarantineLog
    from deltanode.wire.positions import CODECS
    from deltanode.wire.schema import CollectionLayout

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master("local[2]").appName("deltanode-bench-import").config(map={
        **spark_defaults(), "spark.ui.enabled": "false", "spark.driver.memory": "1g"}).getOrCreate()
    try:
        storage = StorageLayout(str(milvus.data_dir / "delta"))
        source = MilvusSource(client=client, meta_root=milvus.meta_root, storage=StorageLayout(
            str(milvus.data_dir / "data")), positions=CODECS["kafka"], batch=args.batch)
        catalog = MilvusCatalog(client, milvus.meta_root, own_client=client, own_root="deltanode-bench/meta",
                                broker=Broker("kafka", args.kafka), positions=CODECS["kafka"])
        schema = next(r for r in catalog.collections() if r.collection_id == made["collection_id"]).schema
        layout = CollectionLayout.from_proto(schema)
        committer = CollectionCommitter(storage, made["collection_id"], layout.insert_schema(),
                                        layout.delete_schema(), QuarantineLog(storage))
        vchannel = made["vchannels"][0]
        t0 = time.monotonic()
        VchannelImporter(spark.sparkContext, storage, source).run(vchannel, made["collection_id"], schema, committer, 1)
        seconds = time.monotonic() - t0
        doc = import_progress(committer.insert_log(), vchannel)
        return doc["rows_done"], doc["deleted_done"], seconds, doc["segments_done"]
    finally:
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
