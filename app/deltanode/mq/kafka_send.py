"""Sending to Kafka: the producer of the Milvus proxy stand-in and of standalone's time ticks
(``Sender``), and a batch sent and confirmed at once (``send_all``: the catalog's messages).

Runs on the driver side (the DataNode, standalone, the admin commands), never in a Spark task.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence

from confluent_kafka import Producer

from .kafka_client import WAIT_STEP, Refusals, Settings, new_client
from .types import BrokerError, Delivered

__all__ = ["Sender", "send_all"]

log = logging.getLogger(__name__)


class Sender:
    """The Milvus proxy stand-in's producer over Kafka (Milvus's settings, without compression).

    ``produce`` waits for room when librdkafka's queue is full; ``on_delivery(position, error)``
    runs from ``poll``/``flush`` once the message landed or failed.
    """

    def __init__(self, bootstrap: str, settings: Settings | None = None) -> None:
        self._producer = new_client(Producer, bootstrap, settings, {
            "linger.ms": 2, "message.max.bytes": 16 << 20, "compression.codec": "none",
            "queue.buffering.max.kbytes": 1 << 20})

    def produce(self, topic: str, value: bytes, on_delivery: Delivered | None = None) -> None:
        callback = None if on_delivery is None else (
            lambda err, msg: on_delivery(-1, str(err)) if err is not None else on_delivery(msg.offset(), ""))
        while True:
            try:
                self._producer.produce(topic, value, on_delivery=callback)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> int:
        """Block until sent or ``timeout``; the number of messages still queued."""
        return self._producer.flush(timeout)

    def close(self) -> None:
        """Delivers what is queued (5 s at most), then closes the client, so that it neither keeps
        reconnecting to a broker that stops after it nor blocks on messages no broker took."""
        left = self._producer.flush(5)
        if left:
            log.warning("closing a producer with %d message(s) no broker took in 5 s: dropped", left)
            self._producer.purge()
            self._producer.poll(0)
        self._producer.close()


def send_all(bootstrap: str, messages: Sequence[tuple[str, bytes]], timeout: float = 30.0, *,
             settings: Settings | None = None) -> list[int]:
    """Send each ``(topic, payload)``, in order per topic; the offset each landed at."""
    refusals = Refusals(bootstrap, settings)
    producer = new_client(Producer, bootstrap, settings, {"message.max.bytes": 16 << 20}, refusals)
    offsets: list[int | None] = [None] * len(messages)
    errors: list[str] = []

    def delivered(i: int, err, msg) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}: {err}")
        else:
            offsets[i] = msg.offset()

    try:
        for i, (topic, payload) in enumerate(messages):
            while True:
                try:
                    producer.produce(topic, payload, on_delivery=functools.partial(delivered, i))
                    break
                except BufferError:   # the local queue is full (a batch of thousands): let it drain
                    producer.poll(0.1)
                    refusals.check(producer)
        topics = sorted({t for t, _ in messages})
        deadline = time.monotonic() + timeout
        while producer.flush(max(0.0, min(WAIT_STEP, deadline - time.monotonic()))) and time.monotonic() < deadline:
            refusals.check(producer)
        if producer.flush(0) or errors or any(o is None for o in offsets):
            refusals.check(producer)
            raise BrokerError(f"could not send to {topics} on {bootstrap}: {errors[:5] or 'timeout'}")
    except BrokerError:
        producer.purge()   # dropped here: nothing the caller was told failed goes out later
        producer.poll(0)
        producer.close()   # and no reconnecting for as long as the error (its traceback) is kept
        raise
    return [o for o in offsets if o is not None]

