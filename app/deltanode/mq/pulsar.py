"""Pulsar-protocol access (docs/pulsar.md): ``PulsarBackend``, and the driver's side of it: high
watermarks, where a range may be cut among tasks, and a ping.

The rest lives beside this module and is importable from it: topics and positions
(``pulsar_positions``), the executor's position-range reads (``pulsar_read``), sending
(``pulsar_send``), and the clients made from the conf's auth and TLS settings (``pulsar_client``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pulsar

from ..wire.positions import PULSAR_ENTRY_BITS as ENTRY_BITS
from .pulsar_client import DISCONNECTED, LOADING, Settings, client_options, explain, new_client
from .pulsar_positions import message_id, position, topic_name
from .pulsar_probe import Handshake, handshake, refusal
from .pulsar_read import OPEN_AHEAD, RECEIVER_QUEUE, RECREATE_AFTER, REREADS, client, read_ranges
from .pulsar_send import Sender, send_all
from .topic_answers import TopicAnswers
from .types import BrokerError, BrokerUnreachable, Chunk, Gap, OffsetRange, even_cut_points

__all__ = ["OPEN_AHEAD", "RECEIVER_QUEUE", "RECREATE_AFTER", "REREADS", "PulsarBackend", "Sender", "Settings",
           "Watermarks", "client", "client_options", "cut_points", "explain", "message_id", "new_client", "ping",
           "position", "read_ranges", "send_all", "topic_name"]

PROBE_INTERVAL = 30.0    # seconds between two refusal probes of one Watermarks (the driver's, every cycle)
PROBE_TIMEOUT = 5.0      # seconds a probe's CONNECT may take (a broker answers it from its network thread)
# Seconds after a connection-level error (or the making of the driver's client) during which a
# lookup the broker fails (``pulsar_client.LOADING``) is taken as a broker loading its topics after a
# start or a pause, not answering yet; later, as its answer: a BrokerError, which fails the vchannels.
LOADING_GRACE = 60.0
# Seconds a topic that had messages may be answered with no last message before the answer is taken
# as it is (an empty topic): a broker continued after a pause may answer so for a moment
# (docs/pulsar.md), which the planner would take for data lost; a topic deleted and created again
# stays empty for longer, and is told so.
EMPTY_GRACE = 60.0
log = logging.getLogger(__name__)


def cut_points(first: int, end: int, parts: int, high: int) -> list[int]:
    """Up to ``parts - 1`` positions inside [first, end) a reader can start at; ``high``: the
    topic's high watermark (a message lies at ``high - 1``).

    A ledger's entries run from 0 without holes, and a reader started at a position no message
    holds (past a closed ledger's last entry, or in a ledger the topic lacks) starts at the next
    message (docs/pulsar.md). So a range is cut evenly when it lies in one ledger: a piece that
    falls past the ledger's end reads nothing and reports the next message as a gap. A range
    that spans ledgers is not cut (even cuts would land in the gap between them), nor one that
    starts at 0, "the earliest", which is no message of the topic.
    """
    if first <= 0 or first >> ENTRY_BITS != (end - 1) >> ENTRY_BITS or end > high:
        return []
    return even_cut_points(first, end, parts)


class Watermarks:
    """Driver side: the position after each topic's last message.

    The Python client asks for a topic's last message id only through a consumer, so there is
    one per topic, on a subscription of this instance's own (two DataNodes read one pchannel, and
    an exclusive subscription takes one consumer). Each
    answer acknowledges up to the last message, so the subscription never holds back the
    topic's retention while it lives; it is removed at close (docs/pulsar.md: after a SIGKILL).
    Positions only grow: a topic answered with no last message after it had some keeps its last
    high watermark for ``EMPTY_GRACE`` seconds.

    A request that fails because the broker does not answer maps to a ``BrokerUnreachable``; a
    failed lookup (``LOADING``) does so only within ``LOADING_GRACE`` seconds of the client's last
    connection-level error, when the broker is likely starting again (its first seconds), and
    otherwise maps to a ``BrokerError`` (a namespace the broker does not have waits forever if
    taken as "not answering").
    """

    def __init__(self, service_url: str, tenant: str = "public", namespace: str = "default",
                 settings: Settings | None = None) -> None:
        self.service_url, self.tenant, self.namespace = service_url, tenant, namespace
        self.subscription = f"deltanode-watermarks-{uuid.uuid4().hex[:12]}"
        self.settings = settings
        self._client = new_client(service_url, settings=settings)
        self._consumers: dict[str, pulsar.Consumer] = {}
        self._probed: tuple[float, Handshake] | None = None   # (when, the last probe's handshake)
        self._disconnected_at = time.monotonic()     # the client's last connection-level error (or its making)
        self._answers = TopicAnswers()
        self._seen: dict[str, int] = {}             # topic -> its last high watermark with a message below it
        self._empty_since: dict[str, float] = {}    # topic -> when it was first answered with none since

    def high(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        try:
            return self._high(topic)
        except pulsar.PulsarException as e:
            raise self._error(f"cannot read the last message id of {topic} from {self.service_url}", e) from None

    def _high(self, topic: str) -> int:
        consumer = self._consumers.get(topic)
        if consumer is None:
            consumer = self._consumers[topic] = self._client.subscribe(
                topic_name(topic, self.tenant, self.namespace), self.subscription, receiver_queue_size=1,
                initial_position=pulsar.InitialPosition.Latest)
        last = consumer.get_last_message_id()
        if last.entry_id() < 0 or last.ledger_id() < 0:
            return self._no_message(topic)
        try:
            consumer.acknowledge_cumulative(last)
        except pulsar.PulsarException as e:   # the next answer acknowledges further; the position stands
            log.debug("acknowledging %s on %s: %s", last, topic, e)
        high = self._seen[topic] = position(last.ledger_id(), last.entry_id()) + 1
        self._empty_since.pop(topic, None)
        return high

    def _no_message(self, topic: str) -> int:
        """The high watermark of a topic answered with no last message: 0 (no message yet), or the
        last one seen for ``EMPTY_GRACE`` seconds after it had some."""
        seen = self._seen.get(topic)
        if seen is None:
            return 0
        since = self._empty_since.setdefault(topic, time.monotonic())
        if time.monotonic() - since < EMPTY_GRACE:
            return seen
        del self._seen[topic]
        return 0

    def first(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The first message a reader from the earliest id gets (retention may have removed ledgers)."""
        try:
            reader = self._client.create_reader(topic_name(topic, self.tenant, self.namespace),
                                                pulsar.MessageId.earliest, receiver_queue_size=1)
        except pulsar.PulsarException as e:
            raise self._error(f"cannot read {topic} from {self.service_url}", e) from None
        try:
            msg = reader.read_next(int(timeout * 1000))
            return position(msg.message_id().ledger_id(), msg.message_id().entry_id())
        except pulsar.Timeout:
            return self.high(topic, partition, timeout)
        except pulsar.PulsarException as e:
            raise self._error(f"cannot read the first message of {topic} from {self.service_url}", e) from None
        finally:
            reader.close()

    def _error(self, what: str, e: pulsar.PulsarException) -> BrokerError:
        """What the client's error ``e`` means (``explain``), a failed lookup as ``LOADING_GRACE`` says."""
        now = time.monotonic()
        if isinstance(e, DISCONNECTED):
            self._disconnected_at = now
        elif isinstance(e, LOADING) and now - self._disconnected_at > LOADING_GRACE and self._handshake().connected:
            return BrokerError(f"{what}: {e}, long after any connection error and while the broker accepts this "
                               f"client: its answer, not a start (does {self.tenant}/{self.namespace} exist? "
                               f"mq.pulsar.tenant, mq.pulsar.namespace; the broker's own words are in the client's "
                               f"log on stderr)")
        return explain(what, e, self.service_url, self.settings, self._probe)

    def _probe(self) -> BrokerError | None:
        """``refusal`` of the last ``_handshake``."""
        return self._handshake().refusal

    def _handshake(self, fresh: bool = False) -> Handshake:
        """A CONNECT sent by hand (``pulsar_probe.handshake``): a new one when ``fresh``, else one at
        most ``PROBE_INTERVAL`` old: while a broker is down, every topic of every cycle fails, and
        each probe may wait its whole timeout."""
        now = time.monotonic()
        if fresh or self._probed is None or now - self._probed[0] >= PROBE_INTERVAL:
            self._probed = (now, handshake(self.service_url, self.settings, PROBE_TIMEOUT))
        return self._probed[1]

    def topic_id(self, topic: str, timeout: float = 10.0) -> str:
        """"": a Pulsar topic's name is all the client sees of it."""
        return ""

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        """``high`` of each topic in turn (the client asks for one last message id at a time, each
        within the client's operation timeout: ``timeout`` goes unused).

        A topic's consumer without a connection (ConnectError, or NotConnected once it waited out
        the operation timeout for one: the broker is away, or the client waits to connect again)
        leaves the topics after it unasked: each would wait as long. They map to the same error,
        and the next call asks them again. A Timeout (a connection, and no answer on it) has the
        broker probed at once (``_handshake``): one that accepts a CONNECT has that topic alone
        not answering (its ledger's bookies away, say), and the topics after it are asked; one
        that does not is away (paused, say), and they are not."""
        out: dict[tuple[str, int], int | BrokerError] = {}
        silent: BrokerError | None = None
        for key in keys:
            if silent is not None:
                out[key] = type(silent)(f"{key[0]} not asked: {silent}")
                continue
            try:
                out[key] = self._high(key[0])
            except pulsar.PulsarException as e:
                what = f"cannot read the last message id of {key[0]} from {self.service_url}"
                if not isinstance(e, DISCONNECTED):
                    out[key] = self._error(what, e)
                elif isinstance(e, pulsar.Timeout) and self._handshake(fresh=True).connected:
                    out[key] = self._error(f"{what} (the broker accepts this client: this topic alone does not "
                                           f"answer)", e)
                else:
                    out[key] = silent = self._error(what, e)
        self._answers.record(out)
        return out

    def answered_since(self, topic: str) -> float | None:
        return self._answers.since(topic)

    def close(self) -> None:
        for consumer in self._consumers.values():
            try:
                consumer.unsubscribe()
            except pulsar.PulsarException:
                consumer.close()
        self._client.close()


def ping(service_url: str, topic: str, timeout: float = 5.0, settings: Settings | None = None) -> None:
    """Raise BrokerError unless the broker answers a lookup of ``topic`` within ``timeout``; the
    error says what the broker refused when it refused the client (``refusal``)."""
    c = new_client(service_url, max(1, int(timeout)), settings)
    try:
        c.get_topic_partitions(topic)
    except pulsar.PulsarException as e:
        raise refusal(service_url, settings, timeout) or BrokerUnreachable(
            f"Pulsar broker {service_url} unreachable: {e}") from None
    finally:
        c.close()


@dataclass(frozen=True, kw_only=True)
class PulsarBackend:
    """``backend.BrokerBackend`` over the Pulsar protocol: ``address`` is the service URL, topics
    ``persistent://{tenant}/{namespace}/{pchannel}``, ``settings`` the conf's auth and TLS."""

    address: str
    tenant: str = "public"
    namespace: str = "default"
    settings: Settings = field(default_factory=dict, repr=False)   # may hold secrets

    def watermarks(self) -> Watermarks:
        return Watermarks(self.address, self.tenant, self.namespace, self.settings)

    def read_ranges(self, ranges: list[OffsetRange]) -> Iterator[tuple[int, Chunk | Gap | BrokerError]]:
        return read_ranges(self.address, ranges, tenant=self.tenant, namespace=self.namespace,
                           settings=self.settings)

    def cut_points(self, first: int, end: int, parts: int, high: int) -> list[int]:
        return cut_points(first, end, parts, high)

    def create_topics(self, pchannels: list[str]) -> list[str]:
        """Creates none: Pulsar creates a topic on its first use."""
        return []

    def send_all(self, messages: Sequence[tuple[str, bytes]]) -> list[int]:
        return send_all(self.address, messages, self.tenant, self.namespace, self.settings)

    def sender(self) -> Sender:
        return Sender(self.address, self.tenant, self.namespace, self.settings)

    def ping(self, probe_topic: str, timeout: float = 5.0) -> None:
        ping(self.address, topic_name(probe_topic, self.tenant, self.namespace), timeout, self.settings)
