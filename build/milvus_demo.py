"""A little Milvus traffic for trying mirror mode (README, "Mirroring a Milvus").

Runs with pymilvus 2.3 (``.venv-milvus/bin/python build/milvus_demo.py``) against a Milvus at
``--uri`` (default 127.0.0.1:19530): a two-shard collection with an Array field and the dynamic
field, 1,000 rows inserted, three deleted, one upserted, then flushed (Milvus persists them in
segments: a mirror started afterwards with ``milvus.start = segments`` imports them).
"""

from __future__ import annotations

import argparse

from pymilvus import (
    Collection,
    CollectionSchema,
    DataType,
    FieldSchema,
    connections,
    utility,
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", default="127.0.0.1:19530", help="host:port of Milvus's proxy")
    p.add_argument("--collection", default="docs", help="collection name (dropped first if it exists)")
    args = p.parse_args()
    host, port = args.uri.rsplit(":", 1)
    connections.connect(host=host, port=port)
    if utility.has_collection(args.collection):
        utility.drop_collection(args.collection)
    schema = CollectionSchema([
        FieldSchema("id", DataType.INT64, is_primary=True),
        FieldSchema("tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=4, max_length=16),
        FieldSchema("vec", DataType.FLOAT_VECTOR, dim=4)], enable_dynamic_field=True)
    docs = Collection(args.collection, schema, shards_num=2)
    docs.insert([{"id": i, "tags": ["a", str(i)], "vec": [float(i), 0.0, 0.0, 1.0], "color": "red"}
                 for i in range(1000)])
    docs.delete("id in [1, 2, 3]")
    docs.upsert([{"id": 10, "tags": ["b"], "vec": [0.0, 0.0, 0.0, 0.0], "color": "blue"}])
    docs.flush()
    docs.create_index("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}})
    docs.load()
    count = docs.query("", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"]
    print(f"{args.collection}: collection id {docs.describe()['collection_id']}, Milvus count(*) = {count}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
