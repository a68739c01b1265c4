"""A DataNode's flowgraph in a process of its own, for the SIGKILL tests.

    python flowgraph_runner.py SPEC_JSON

Runs one vchannel's flowgraph until the channel's insert_log txn reaches ``target`` (then
exits 0), or until a crash point kills it.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "app"))

from deltanode import faults  # noqa: E402


def main() -> int:
    args = json.loads(sys.argv[1])
    os.setpgrp()
    faults.arm(os.getpgrp())
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "app"))
    from deltanode.flowgraph.launch import prepare_spark, start_flowgraph
    from deltanode.logs import setup_logging
    from deltanode.storage.layout import StorageLayout
    from deltanode.storage.tables import open_table
    from deltanode.wire.datapb import VchannelInfo
    from pyspark.sql import SparkSession
    from deltanode.jvm import spark_defaults
    spark = SparkSession.builder.config(map={
        **spark_defaults(), "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    prepare_spark(spark)
    setup_logging("INFO")  # the batch lines (handoff counts) are asserted on
    storage = StorageLayout(args["storage_root"])
    info = VchannelInfo(collectionID=args["collection_id"], channelName=args["vchannel"])
    query = start_flowgraph(spark, storage, info, args["schema_b64"], bootstrap=args["bootstrap"],
                            scratch_dir=args["scratch"], trigger_interval="100 milliseconds",
                            max_messages=args["max_messages"], splits=2, handoff_dir=args.get("handoff_dir"))
    deadline = time.monotonic() + args.get("timeout", 120)
    while time.monotonic() < deadline:
        table = open_table(storage.insert_log(args["collection_id"]))
        if table is not None and (table.transaction_version(args["vchannel"]) or 0) >= args["target"]:
            query.stop()
            return 0
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    print("timed out", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
