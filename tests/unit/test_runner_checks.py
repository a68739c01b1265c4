"""Start-up refusals that must come before any service or JVM starts: the broker of mq.type."""

import pytest

from deltanode.config import Conf, ConfError
from deltanode.config.settings import Settings
from deltanode.mq.broker import Broker


def test_an_embedded_pulsar_broker_needs_a_loopback_service_url(tmp_path):
    with pytest.raises(ConfError, match=r"mq.pulsar.service.url.*loopback endpoint, e.g. pulsar://127.0.0.1:6650"):
        Conf.from_dict({"storage.root": str(tmp_path), "mq.type": "pulsar", "embedded.broker": True,
                        "mq.pulsar.service.url": "pulsar://10.1.2.3:6650"})


def test_the_broker_follows_mq_type(tmp_path):
    pulsar = Conf.from_dict({"storage.root": str(tmp_path), "mq.type": "pulsar", "embedded.broker": True,
                             "mq.pulsar.service.url": "pulsar://127.0.0.1:6651", "mq.pulsar.tenant": "t1"})
    assert pulsar.broker_key == "mq.pulsar.service.url" and pulsar.broker_hostports() == [("127.0.0.1", 6651)]
    assert Broker.of(Settings.of(pulsar).broker) == Broker("pulsar", "pulsar://127.0.0.1:6651", "t1", "default",
                                                           (("receiver.queue.size", "1000"),))
    kafka = Conf.from_dict({"storage.root": str(tmp_path), "mq.kafka.bootstrap.servers": "127.0.0.1:9093"})
    assert kafka.broker_key == "mq.kafka.bootstrap.servers" and kafka.broker_hostports() == [("127.0.0.1", 9093)]
    assert Broker.of(Settings.of(kafka).broker) == Broker("kafka", "127.0.0.1:9093")
