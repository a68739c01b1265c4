"""Importing what a Milvus already persisted: the segment list and binlog lists in its etcd meta,
the insert binlogs of each segment's fields (or its column groups, in Milvus 2.6's storage
version 2) and its deltalogs, read from Milvus's object storage
and written into DeltaNode's Delta tables, so that DeltaNode takes over a collection without
replaying its whole history from the message queue.
"""
