"""The coordinator's side of MEP 7 (runs in the ``datacoord`` process, or inside ``standalone``): where
collections come from (DeltaNode's own catalog or a Milvus's etcd meta), which DataNode holds which
vchannel, and the VchannelInfo each hand-over carries, built from the Delta meta. A running DataNode
never needs it to keep persisting."""
