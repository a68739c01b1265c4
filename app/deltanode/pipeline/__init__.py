"""The DataNode's shared pipeline (driver): one loop whose cycles plan the offset ranges of every
pchannel, run one Spark job, apply what it wrote to each vchannel, and sync collections to Delta
under the fence; beside it the loader of vchannels, delete marking, the compactor and the warm-up.
Its Spark jobs do not grow with the number of vchannels."""
