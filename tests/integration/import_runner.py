"""A Milvus import of one vchannel in a process of its own, for the SIGKILL tests.

    python import_runner.py SPEC_JSON

Runs ``VchannelImporter.run`` to its end (then exits 0), or until a crash point kills it
(``DELTANODE_CRASH_AT``): nothing of the import is in its memory when it runs again.
"""

from __future__ import annotations

import base64
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "app"))

from deltanode.failure import crash_points  # after the sys.path line above


def main() -> int:
    args = json.loads(sys.argv[1])
    os.setpgrp()   # a crash point kills this process group: never the test's
    crash_points.arm(os.getpgrp())
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "app"))
    from pyspark.sql import SparkSession

    from deltanode.config.jvm_options import spark_defaults
    from deltanode.delta.layout import StorageLayout
    from deltanode.etcd.client import EtcdClient
    from deltanode.logs import setup_logging
    from deltanode.milvus_import.importer import MilvusSource, VchannelImporter
    from deltanode.state.commit import CollectionCommitter, QuarantineLog
    from deltanode.wire.milvus_proto import schema_pb2
    from deltanode.wire.positions import CODECS
    from deltanode.wire.schema import CollectionLayout
    spark = SparkSession.builder.config(map={**spark_defaults(), "spark.ui.enabled": "false",
                                             "spark.driver.memory": "512m"}).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    setup_logging("INFO")
    schema = schema_pb2.CollectionSchema.FromString(base64.b64decode(args["schema"]))
    layout = CollectionLayout.from_proto(schema)
    storage = StorageLayout(args["storage_root"])
    committer = CollectionCommitter(storage, args["collection_id"], layout.insert_schema(), layout.delete_schema(),
                                    QuarantineLog(storage))
    with EtcdClient(args["etcd"]) as client:
        source = MilvusSource(client=client, meta_root=args["meta_root"], storage=StorageLayout(args["source_root"]),
                              positions=CODECS["kafka"], batch=args["batch"])
        VchannelImporter(spark.sparkContext, storage, source).run(
            args["vchannel"], args["collection_id"], schema, committer, args["node_id"])
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
