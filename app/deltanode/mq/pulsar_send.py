"""Sending to Pulsar: the producer of the Milvus proxy stand-in and of standalone's time ticks
(``Sender``), and a batch sent and confirmed at once (``send_all``: the catalog's messages).

Runs on the driver side (the DataNode, standalone, the admin commands), never in a Spark task.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulsar

from .pulsar_client import Settings, explain, new_client
from .pulsar_positions import position, topic_name
from .types import Delivered

__all__ = ["Sender", "send_all"]


def send_all(service_url: str, messages: Sequence[tuple[str, bytes]], tenant: str = "public",
             namespace: str = "default", settings: Settings | None = None) -> list[int]:
    """Send each ``(pchannel, payload)``, in order per pchannel; the position each landed at."""
    c = new_client(service_url, settings=settings)
    producers: dict[str, pulsar.Producer] = {}
    try:
        out = []
        for pchannel, payload in messages:
            producer = producers.get(pchannel)
            if producer is None:
                producer = producers[pchannel] = c.create_producer(topic_name(pchannel, tenant, namespace),
                                                                   batching_enabled=False)
            mid = producer.send(payload)
            out.append(position(mid.ledger_id(), mid.entry_id()))
        return out
    except pulsar.PulsarException as e:
        raise explain(f"could not send to {sorted({p for p, _ in messages})} on {service_url}", e, service_url,
                      settings) from None
    finally:
        for producer in producers.values():
            producer.close()
        c.close()


class Sender:
    """The Milvus proxy stand-in's producer over Pulsar: one producer per topic, batching off and
    no compression, sends asynchronous until ``flush``; ``on_delivery(position, error)`` runs on
    the client's thread once a message landed or failed."""

    def __init__(self, service_url: str, tenant: str = "public", namespace: str = "default",
                 settings: Settings | None = None) -> None:
        self.service_url, self.tenant, self.namespace, self.settings = service_url, tenant, namespace, settings
        self._client = new_client(service_url, settings=settings)
        self._producers: dict[str, pulsar.Producer] = {}
        self._errors: list[str] = []

    def produce(self, pchannel: str, payload: bytes, on_delivery: Delivered | None = None) -> None:
        producer = self._producers.get(pchannel)
        if producer is None:
            topic = topic_name(pchannel, self.tenant, self.namespace)
            try:
                producer = self._producers[pchannel] = self._client.create_producer(
                    topic, batching_enabled=False, block_if_queue_full=True)
            except pulsar.PulsarException as e:
                raise explain(f"cannot send to {topic} on {self.service_url}", e, self.service_url,
                              self.settings) from None

        def sent(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            if result != pulsar.Result.Ok:
                self._errors.append(str(result))
                if on_delivery is not None:
                    on_delivery(-1, str(result))
            elif on_delivery is not None:
                on_delivery(position(msg_id.ledger_id(), msg_id.entry_id()), "")

        producer.send_async(payload, sent)

    def flush(self, _timeout: float = 30.0) -> int:
        """Returns how many messages failed (as Kafka's flush returns how many are still queued)."""
        for producer in self._producers.values():
            producer.flush()
        failed, self._errors = len(self._errors), []
        return failed

    def close(self) -> None:
        self._client.close()
