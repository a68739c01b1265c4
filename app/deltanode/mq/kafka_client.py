"""librdkafka clients made from the conf's settings, and a secured broker's refusal of them named.

Both sides make their clients here (the executor's range reader its consumer, the driver its
metadata, admin and producer clients); the driver's clients also watch for a refusal.

A secured broker (``mq.kafka.security.protocol = SASL_SSL`` and the rest of ``mq.kafka.*``) that
refuses the client is named at once: librdkafka keeps retrying a refused login or TLS handshake
as if the broker were merely down, and its requests end in "Broker transport failure" when their
timeout runs out. The driver's clients take its error callback (``Refusals``) and stop waiting at
the first ``_AUTHENTICATION`` or ``_SSL`` error, which the ``BrokerError`` then quotes
(``refusal_message``).
"""

from __future__ import annotations

import re
import time

from confluent_kafka import KafkaError, KafkaException

from .types import BrokerError, BrokerRefused, BrokerUnreachable

__all__ = ["OWN_LOG_LEVEL", "REFUSED", "SOCKET_TIMEOUT_MS", "UNANSWERED", "WAIT_STEP", "Refusals", "Settings",
           "list_topics_watching", "new_client", "refusal_message"]

Settings = dict[str, str]   # librdkafka properties from the conf (mq.kafka.*): SASL, TLS, ...
SOCKET_TIMEOUT_MS = 10000   # the driver's metadata clients and the range readers
REFUSED = (KafkaError._AUTHENTICATION, KafkaError._SSL)   # what retrying never fixes
# What the client says of a broker that is down, paused or cut off, and what a broker answers while it
# takes its partitions back (started again, or continued after a pause: it serves them a few seconds
# after it answers metadata requests, and under new leader epochs the client learns at its next
# metadata request): nothing was refused or lost, and asking again later succeeds (``BrokerUnreachable``).
UNANSWERED = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._MSG_TIMED_OUT,
              KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
              KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.BROKER_NOT_AVAILABLE,
              KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE)
# librdkafka's own log level for DeltaNode's long-lived clients (the driver's watermark clients, the
# executors' range readers): critical only. While the broker is away such a client tries to connect
# again every 50-100 ms and logs each failure, about 20 lines a second per client, for as long as the
# outage lasts; DeltaNode reports the outage itself, once (``reachability``). A conf can set
# ``mq.kafka.log_level`` to have them back.
OWN_LOG_LEVEL = 2
WAIT_STEP = 0.25   # seconds: how often a waiting request looks at the errors the client reported


class Refusals:
    """A client's ``error_cb``: keeps the first refused login or TLS handshake (librdkafka reports
    them there, from the client's ``poll``, and only logs them otherwise)."""

    def __init__(self, bootstrap: str, settings: Settings | None) -> None:
        self.bootstrap, self.settings = bootstrap, settings or {}
        self.first: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if self.first is None and error.code() in REFUSED:
            self.first = error

    def check(self, client) -> None:
        """Serve ``client``'s callbacks; raise BrokerError if the broker refused it."""
        client.poll(0)   # a consumer here has nothing assigned: poll only serves callbacks
        if self.first is not None:
            raise BrokerRefused(refusal_message(self.bootstrap, self.first, self.settings))


def refusal_message(bootstrap: str, error: KafkaError, settings: Settings) -> str:
    """One line naming the broker, what it refused, and the conf keys to look at, from librdkafka's
    ``_AUTHENTICATION`` or ``_SSL`` error ("sasl_ssl://host:port/bootstrap: SASL authentication
    error: ... (after 364ms in state AUTH_REQ)"); the password never appears in it."""
    detail = re.sub(r"^\S+://\S+: ", "", error.str())
    detail = re.sub(r" \(after \d+ms in state \w+\)$", "", detail)
    if error.code() == KafkaError._AUTHENTICATION:
        user = settings.get("sasl.username")
        who = f" of user {user!r}" if user else ""
        detail = detail.removeprefix("SASL authentication error: ")
        return (f"Kafka broker {bootstrap} refused SASL authentication{who}: {detail}; check "
                f"mq.kafka.sasl.username and mq.kafka.sasl.password (DELTANODE_MQ_KAFKA_SASL_PASSWORD)")
    if "certificate verify failed" in detail:
        ca = settings.get("ssl.ca.location")
        trusted = f"mq.kafka.ssl.ca.location ({ca})" if ca else "mq.kafka.ssl.ca.location (unset: the system's CAs)"
        return (f"Kafka broker {bootstrap} is not trusted: TLS certificate verification failed: {detail}; "
                f"check {trusted}")
    return f"Kafka broker {bootstrap} refused the TLS connection: {detail}; check the mq.kafka.ssl.* settings"


def list_topics_watching(client, bootstrap: str, timeout: float, refusals: Refusals):
    """``client.list_topics``, in steps of ``WAIT_STEP`` so that a refusal ends the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.list_topics(timeout=max(0.01, min(WAIT_STEP, deadline - time.monotonic())))
        except KafkaException as e:
            refusals.check(client)
            if time.monotonic() >= deadline:
                raise BrokerUnreachable(f"Kafka broker {bootstrap} unreachable: {e}") from None


def new_client(kind: type, bootstrap: str, settings: Settings | None, own: dict | None = None,
               refusals: Refusals | None = None):
    """A librdkafka client of ``kind``: DeltaNode's ``own`` properties, then the conf's ``settings``
    (config.KAFKA_RESERVED refuses the ones exactly-once depends on); a property the client
    refuses is named as the conf key that set it. ``refusals`` becomes its error callback."""
    callbacks = {} if refusals is None else {"error_cb": refusals}
    try:
        return kind({"bootstrap.servers": bootstrap, **(own or {}), **(settings or {}), **callbacks})
    except KafkaException as e:
        bad = [k for k in (settings or {}) if k in str(e)]
        where = f" (conf key mq.kafka.{bad[0]})" if bad else ""
        raise BrokerError(f"the Kafka client refused its settings{where}: {e.args[0].str()}") from None
