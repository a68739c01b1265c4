"""The Delta protocol as DeltaNode writes and reads it (driver and executors): where tables live
(``layout``), the object store under them, the log (``delta_log``: one JSON commit per version, put if
absent), its actions, deletion vectors, checkpoints, replay of the live files, table schemas, durable
writes on filesystems, and how a full filesystem reads to an operator. Nothing here knows a
vchannel."""
