"""What runs in a Spark task, on the executors: read a cycle's offset ranges and dispatch each
message to its vchannels (``task``, ``dispatch``), route, filter and decode it (``route``,
``decode``, ``pack_order``, ``replay_filter``), write binlogs with their bloom filters
(``binlog_writer``), mark the rows deletes remove (``delete_mark_task``) and rewrite compacted
segments (``rewrite``). It shares records with the driver (``deltanode.records``) and imports
none of the driver's modules: ``tests/unit/test_executor_imports.py`` fails when it does.
"""
