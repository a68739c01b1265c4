"""Message queues behind one backend protocol (driver and executors): Kafka (librdkafka) and Pulsar
clients made from the conf, bounded reads of offset ranges on executors, watermarks and
reachability on the driver, and the producers of the Milvus proxy stand-in and of TimeTicks."""
