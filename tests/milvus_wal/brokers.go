package main

import (
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	confluent "github.com/confluentinc/confluent-kafka-go/kafka"
)

// The broker clients' own id types, as Milvus's WAL message ids expose them.
type (
	kafkaOffset     = confluent.Offset
	pulsarMessageID = pulsarclient.MessageID
)
