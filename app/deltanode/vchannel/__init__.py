"""One vchannel's logical flowgraph as the driver keeps it (driver only): the state it starts from, the
batches read since its last commit, how each batch moves its checkpoint and segments, sealing, and
its routing row for the next cycle's tasks. What runs over the messages themselves (Milvus's ddNode
and write path) is the executor's ``executor.route``."""
