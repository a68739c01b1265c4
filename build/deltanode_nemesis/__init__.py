"""The nemesis: a standalone and a second DataNode under Milvus-like traffic while a seeded
schedule breaks things (processes killed and paused, the broker killed and paused, etcd
paused), then everything healed and a ledger checked: every row on the broker exactly once in
Delta, deletes and upserts applied, every table readable by DuckDB and Spark.

``build/nemesis.py --help``; docs/testing.md ("The nemesis") says what a run checks and what the
long runs found.
"""
