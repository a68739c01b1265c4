"""DeltaNode benchmark: ``build/bench.sh`` (``python -m deltanode_bench.main``).

Modules: ``workload`` produces Milvus InsertRequests and records where each one landed;
``reference`` is the plain-Python consume -> decode -> parquet baseline; ``datanode_run``
runs flowgraphs in a child process; ``procs`` samples RSS/CPU of that process tree;
``latency`` and ``report`` are pure helpers; ``main`` runs the phases and prints the table.
"""
