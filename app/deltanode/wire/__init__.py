"""Milvus's formats, as bytes on a channel or keys in etcd (both sides, pure logic): protobuf messages
(shipped by pymilvus or declared by hand with their real field numbers), positions and hybrid
timestamps, channel names, collection schemas and the 2.6 WAL message properties."""
