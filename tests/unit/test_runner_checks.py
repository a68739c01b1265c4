"""Start-up refusals that must come before any service or JVM starts."""

import pytest
from deltanode.config import Conf
from deltanode.datanode.run import require_kafka


def test_pulsar_is_refused_with_the_key_and_where_it_was_set(tmp_path):
    conf = Conf.from_dict({"storage.root": str(tmp_path), "mq.type": "pulsar"})
    with pytest.raises(SystemExit, match=r"mq.type = pulsar .*Kafka-protocol brokers only"):
        require_kafka(conf)


def test_kafka_passes(tmp_path):
    assert require_kafka(Conf.from_dict({"storage.root": str(tmp_path), "mq.type": "kafka"})) is None
