"""The ``admin`` subcommand (its own short driver process): create collections in DeltaNode's catalog,
ask for a flush through etcd, produce test traffic, and read DeltaNode's tables and state back for an
operator (collections, channels, segments, health), and ``admin verify``, a mirror held against the
Milvus it mirrors. It never writes a Delta table: the DataNode does."""
