"""A DataNode's shared pipeline in a process of its own, for the SIGKILL tests.

    python pipeline_runner.py SPEC_JSON

Runs the pipeline for the given vchannels until every one's insert_log txn reaches its
target and its compactor made ``rewrites`` segment rewrites (then exits 0), or until a crash
point or the test kills it.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "app"))

from deltanode.failure import crash_points  # after the sys.path line above


def main() -> int:
    args = json.loads(sys.argv[1])
    os.setpgrp()
    crash_points.arm(os.getpgrp())
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "app"))
    from pyspark.sql import SparkSession

    from deltanode.config.jvm_options import spark_defaults
    from deltanode.config.sections.pipeline import CompactionSettings, Limits, PipelineSettings, TriggerSettings
    from deltanode.delta import delta_log
    from deltanode.delta.delta_log import DeltaLog
    from deltanode.delta.layout import StorageLayout
    from deltanode.delta.object_store import StoreOptions
    from deltanode.logs import setup_logging
    from deltanode.mq.broker import Broker
    from deltanode.pipeline.pipeline import Pipeline
    from deltanode.wire.datapb import VchannelInfo
    from deltanode.wire.schema import schema_from_json
    spark = SparkSession.builder.config(map={**spark_defaults(), "spark.ui.enabled": "false"}).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    setup_logging("INFO")
    storage = StorageLayout(args["storage_root"], StoreOptions(fsync=args.get("fsync", True)))
    # A short interval puts checkpoints among the commits a test's power cut may catch.
    delta_log.CHECKPOINT_INTERVAL = args.get("checkpoint_interval", delta_log.CHECKPOINT_INTERVAL)
    compaction = CompactionSettings(**args.get("compaction", {"interval": 0}))
    pipe = Pipeline(spark.sparkContext, storage, Broker(args["mq"], args["address"]),
                    PipelineSettings(limits=Limits(max_messages=args["max_messages"], splits=2),
                                     trigger=TriggerSettings(interval=0.1), compaction=compaction)).start()
    for coll in args["collections"]:
        schema = schema_from_json(coll["schema"], coll["name"])
        for v in coll["vchannels"]:
            pipe.add(VchannelInfo(collectionID=coll["collection_id"], channelName=v), schema)
    targets = {(c["collection_id"], v): args["targets"][v] for c in args["collections"] for v in c["vchannels"]}
    deadline = time.monotonic() + args.get("timeout", 120)
    while time.monotonic() < deadline:
        logs = {cid: DeltaLog.open(storage.insert_log(cid)) for cid in {cid for cid, _ in targets}}
        compacted = pipe.compactor.totals.rewrites
        if all(logs[cid] is not None and (logs[cid].txn(v) or 0) >= t for (cid, v), t in targets.items()) \
                and compacted >= args.get("rewrites", 0):
            pipe.stop()
            return 0
        time.sleep(0.2)
    print(f"timed out; vchannels: {pipe.snapshots()}; compaction: {pipe.compactor.totals}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
