"""A DataNode process (the Spark driver): its etcd session and lease, the MEP 7 channel watch that adds
and removes vchannels of the shared pipeline, flush requests, progress lines, metrics and health."""
