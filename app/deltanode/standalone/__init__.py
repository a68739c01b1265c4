"""``./spark-submit.sh standalone``: one machine's whole DeltaNode (runs on the driver): embedded etcd,
Apache Kafka or Pulsar started from their jars, rootcoord's TimeTicks, a channel assigner and a
DataNode, started and stopped as one group."""
