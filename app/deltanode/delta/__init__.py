"""The Delta protocol as DeltaNode writes and reads it (driver and executors): where tables live
(``layout``), the object store under them, the log (``delta_log``: one JSON commit per version, put if
absent), its actions, deletion vectors, checkpoints, replay of the live files, table schemas, durable
writes on filesystems, and what an out-of-space or unanswered store looks like. Nothing here knows a
vchannel."""
