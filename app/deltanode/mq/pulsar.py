"""Pulsar-protocol access: high watermarks and bounded position-range reads (docs/pulsar.md).

Topics are named as Milvus names them, ``persistent://{tenant}/{namespace}/{pchannel}``,
non-partitioned. A position is ``ledgerId << 24 | entryId``: it orders as the message ids do,
and grows by one per message inside a ledger. Between ledgers (a rollover, or a topic's
first ledger, whose id the broker allocates) positions jump: a read that meets entry 0 of a
later ledger knows no message lies in between, and when that is past its range's end it
reports the next position (``Gap``) so the vchannel moves over the gap at once.

Each range is read by a reader started inclusively at its first position, with a receiver queue
of up to ``RECEIVER_QUEUE`` messages (never more than the range holds, so a reader does not fetch
far past its range's end). The source also defends against a broker that delivers imperfectly (a
Pulsar-protocol broker need not be Apache Pulsar): a message at or below the last one kept is a
repeat and is dropped; an entry that jumps ahead inside a ledger is re-read from the missing one,
never skipped; a reader silent on a range that holds messages is replaced.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pulsar

from ..wire.positions import PULSAR_ENTRY_BITS as ENTRY_BITS
from ..wire.positions import pulsar_ledger_entry_at, pulsar_position
from .kafka import cut_points as even_cut_points
from .pulsar_probe import refusal
from .types import BrokerError, BrokerRefused, Chunk, Delivered, Gap, OffsetRange

REREADS = 5              # attempts to fill a hole inside a ledger before the range fails
PROBE_INTERVAL = 30.0    # seconds between two refusal probes of one Watermarks (the driver's, every cycle)
# A reader that delivers nothing for this long although its range holds messages is replaced by a
# new one at the same position, before the stall timeout would fail the vchannel.
RECREATE_AFTER = 5.0
# Messages a reader prefetches (mq.pulsar.receiver.queue.size). Apache Pulsar delivers a full queue
# once each and in order; the Python loop then reads ~4x faster than with one message per round trip
# (docs/pulsar.md).
RECEIVER_QUEUE = 1000
OPEN_AHEAD = 4   # readers opened beside the one being read (read_ranges)
log = logging.getLogger(__name__)
_clients: dict[tuple, pulsar.Client] = {}   # per process (a Spark Python worker reads many tasks)
Settings = dict[str, str]   # auth.*, tls.*, receiver.queue.size (config keys mq.pulsar.*, prefix removed)


def client_options(settings: Settings | None) -> dict:
    """``pulsar.Client`` keyword arguments for the conf's authentication and TLS settings."""
    settings = settings or {}
    options: dict = {}
    plugin = settings.get("auth.plugin")
    if plugin:   # an unknown plugin is logged by the client, and the broker then refuses the connection
        options["authentication"] = pulsar.Authentication(plugin, settings.get("auth.params", ""))
    if settings.get("tls.trust.certs.file"):
        options["tls_trust_certs_file_path"] = settings["tls.trust.certs.file"]
    for key, arg in (("tls.allow.insecure", "tls_allow_insecure_connection"),
                     ("tls.validate.hostname", "tls_validate_hostname")):
        if key in settings:
            options[arg] = str(settings[key]).lower() == "true"
    return options


def new_client(service_url: str, timeout_seconds: int = 10, settings: Settings | None = None) -> pulsar.Client:
    """A client whose own log (warnings and errors) is appended to this process's stderr.

    The client logs from its C++ threads. Given a Python logger, it calls into the interpreter
    for every line, and a process that exits with a client it had (closed or not) aborts in
    about half of the exits ("terminate called without an active exception", SIGABRT: 24 of 40
    runs of a script that produced, read and closed; docs/pulsar.md). The native file logger
    never calls Python (0 of 40); it opens the file in append mode, so stderr is neither
    truncated nor mixed into stdout, where ``admin`` prints its JSON.
    """
    return pulsar.Client(service_url, operation_timeout_seconds=timeout_seconds,
                         logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, "/dev/stderr"), **client_options(settings))


def topic_name(pchannel: str, tenant: str = "public", namespace: str = "default") -> str:
    return f"persistent://{tenant}/{namespace}/{pchannel}"


def position(ledger: int, entry: int) -> int:
    """The int64 position of a message id (docs/pulsar.md)."""
    try:
        return pulsar_position(ledger, entry)
    except ValueError as e:
        raise BrokerError(str(e)) from None


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


def message_id(pos: int) -> pulsar.MessageId:
    """The message id at ``pos``, as the topic numbers it (partition and batch index -1)."""
    return pulsar.MessageId(-1, *pulsar_ledger_entry_at(pos), -1)


def client(service_url: str, settings: Settings | None = None) -> pulsar.Client:
    key = (service_url, tuple(sorted((settings or {}).items())))
    found = _clients.get(key)
    if found is None:
        found = _clients[key] = new_client(service_url, settings=settings)
    return found


class Watermarks:
    """Driver side: the position after each topic's last message.

    The Python client asks for a topic's last message id only through a consumer, so there is
    one per topic, on a subscription of this instance's own (two DataNodes read one pchannel, and
    an exclusive subscription takes one consumer). Each
    answer acknowledges up to the last message, so the subscription never holds back the
    topic's retention while it lives; it is removed at close (docs/pulsar.md: after a SIGKILL).
    """

    def __init__(self, service_url: str, tenant: str = "public", namespace: str = "default",
                 settings: Settings | None = None) -> None:
        self.service_url, self.tenant, self.namespace = service_url, tenant, namespace
        self.subscription = f"deltanode-watermarks-{uuid.uuid4().hex[:12]}"
        self.settings = settings
        self._client = new_client(service_url, settings=settings)
        self._consumers: dict[str, pulsar.Consumer] = {}
        self._probed: tuple[float, BrokerError | None] | None = None   # (when, what refusal said)

    def high(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        try:
            consumer = self._consumers.get(topic)
            if consumer is None:
                consumer = self._consumers[topic] = self._client.subscribe(
                    topic_name(topic, self.tenant, self.namespace), self.subscription, receiver_queue_size=1,
                    initial_position=pulsar.InitialPosition.Latest)
            last = consumer.get_last_message_id()
        except pulsar.PulsarException as e:
            raise self._error(f"cannot read the last message id of {topic} from {self.service_url}", e) from None
        if last.entry_id() < 0 or last.ledger_id() < 0:
            return 0   # no message yet
        try:
            consumer.acknowledge_cumulative(last)
        except pulsar.PulsarException as e:   # the next answer acknowledges further; the position stands
            log.debug("acknowledging %s on %s: %s", last, topic, e)
        return position(last.ledger_id(), last.entry_id()) + 1

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
            raise BrokerError(f"cannot read the first message of {topic} from {self.service_url}: {e}") from None
        finally:
            reader.close()

    def _error(self, what: str, e: pulsar.PulsarException) -> BrokerError:
        return explain(what, e, self.service_url, self.settings, self._probe)

    def _probe(self) -> BrokerError | None:
        """``refusal``, asked at most once per ``PROBE_INTERVAL``: while a broker is down, every
        topic of every cycle fails, and each probe may wait its whole timeout."""
        now = time.monotonic()
        if self._probed is None or now - self._probed[0] >= PROBE_INTERVAL:
            self._probed = (now, refusal(self.service_url, self.settings, 5.0))
        return self._probed[1]

    def topic_id(self, topic: str, timeout: float = 10.0) -> str:
        """"": a Pulsar topic's name is all the client sees of it."""
        return ""

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        """``high`` of each topic in turn (the client asks for one last message id at a time)."""
        out: dict[tuple[str, int], int | BrokerError] = {}
        for key in keys:
            try:
                out[key] = self.high(*key, timeout=timeout)
            except BrokerError as e:
                out[key] = e
        return out

    def close(self) -> None:
        for consumer in self._consumers.values():
            try:
                consumer.unsubscribe()
            except pulsar.PulsarException:
                consumer.close()
        self._client.close()


def read_ranges(service_url: str, ranges: list[OffsetRange], *, tenant: str = "public", namespace: str = "default",
                chunk_messages: int = 64, stall_timeout: float = 60.0,
                settings: Settings | None = None) -> Iterator[tuple[int, Chunk | Gap | BrokerError]]:
    """Yield ``(i, chunk)``: lists of ``(position, payload)`` of ``ranges[i]`` in order, one range
    after another; a range the broker cannot serve yields ``(i, BrokerError)`` once, a range that
    ends in a gap ``(i, Gap)`` last.

    Opening a reader is a round trip to the broker, and so is its first delivery: the readers of
    the next ``OPEN_AHEAD`` ranges open (and start prefetching) on threads while this one is read,
    so a task of many small ranges waits for about one round trip instead of one per range.
    """
    c = client(service_url, settings)
    queue_size = int((settings or {}).get("receiver.queue.size", RECEIVER_QUEUE))
    todo = [(i, r, topic_name(r.topic, tenant, namespace)) for i, r in enumerate(ranges) if r.end > r.start]
    if not todo:
        return

    def open_reader(r: OffsetRange, topic: str) -> pulsar.Reader | BrokerError:
        try:
            return c.create_reader(topic, message_id(r.start), receiver_queue_size=_queue(queue_size, r),
                                   start_message_id_inclusive=True)
        except pulsar.PulsarException as e:
            return BrokerError(f"cannot read {topic} at {r.start}: {e}")

    pool = ThreadPoolExecutor(max_workers=max(1, min(OPEN_AHEAD, len(todo))), thread_name_prefix="pulsar-open")
    opening = [pool.submit(open_reader, r, topic) for _, r, topic in todo[:OPEN_AHEAD + 1]]
    taken = 0   # readers handed to _read_range, which closes them
    try:
        for k, (i, r, topic) in enumerate(todo):
            if k + OPEN_AHEAD + 1 < len(todo):
                _, ahead, ahead_topic = todo[k + OPEN_AHEAD + 1]
                opening.append(pool.submit(open_reader, ahead, ahead_topic))
            reader = opening[k].result()
            taken += 1
            yield from _read_range(c, i, r, topic, chunk_messages, stall_timeout, queue_size, reader)
    finally:
        for future in opening[taken:]:   # opened ahead of a read that never came (the caller stopped)
            if not future.cancel() and isinstance(ahead_reader := future.result(), pulsar.Reader):
                _close_quietly(ahead_reader)
        pool.shutdown(wait=False)


def _queue(queue_size: int, r: OffsetRange) -> int:
    return max(1, min(queue_size, r.end - r.start))


def _close_quietly(reader: pulsar.Reader) -> None:
    try:
        reader.close()
    except pulsar.PulsarException:
        pass   # the connection is gone: so is the reader on the broker's side


def _read_range(c: pulsar.Client, i: int, r: OffsetRange, topic: str, chunk_messages: int, stall_timeout: float,
                queue_size: int, reader: pulsar.Reader | BrokerError
                ) -> Iterator[tuple[int, Chunk | Gap | BrokerError]]:
    if isinstance(reader, BrokerError):
        yield i, reader
        return
    expected, rereads, recreated = r.start, 0, 0
    chunk: Chunk = []
    queue = _queue(queue_size, r)
    last_progress = time.monotonic()
    try:
        while expected < r.end:
            try:
                msg = reader.read_next(500)
            except pulsar.Timeout:
                silent = time.monotonic() - last_progress
                if silent > stall_timeout:
                    yield i, BrokerError(f"no message from {topic} at position {expected} for {stall_timeout:.0f} s "
                                         f"(range ends at {r.end})")
                    return
                if silent > RECREATE_AFTER * (recreated + 1):
                    recreated += 1
                    log.info("%s: no delivery at position %d for %.0f s: reading again with a new reader",
                             topic, expected, silent)
                    reader.close()
                    reader = c.create_reader(topic, message_id(expected), receiver_queue_size=queue,
                                             start_message_id_inclusive=True)
                continue
            mid = msg.message_id()
            pos = position(mid.ledger_id(), mid.entry_id())
            if pos < expected:
                continue   # delivered twice
            if pos > expected and pos >> ENTRY_BITS > expected >> ENTRY_BITS:
                if mid.entry_id() != 0:
                    yield i, BrokerError(f"{topic}: after position {expected} came entry {mid.entry_id()} of a "
                                         f"later ledger {mid.ledger_id()}, not its first: refusing to skip data")
                    return
                if pos >= r.end:
                    if chunk:
                        yield i, chunk
                    yield i, Gap(position=pos)   # nothing before the next ledger: the range is done
                    return
                expected = pos          # a new ledger inside the range: nothing was in between
            if pos > expected:
                rereads += 1
                if rereads > REREADS:
                    ledger, entry = pulsar_ledger_entry_at(expected)
                    yield i, BrokerError(f"{topic}: entry {entry} of ledger {ledger} never delivered "
                                         f"({REREADS} re-reads from it)")
                    return
                reader.seek(message_id(expected))   # a skipped delivery: read again from the hole
                continue
            chunk.append((pos, msg.data()))
            expected, rereads, last_progress = pos + 1, 0, time.monotonic()
            if len(chunk) >= chunk_messages:
                yield i, chunk
                chunk = []
        if chunk:
            yield i, chunk
    except pulsar.PulsarException as e:
        yield i, BrokerError(f"reading {topic} at {expected}: {e}")
    finally:
        _close_quietly(reader)


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


def explain(what: str, e: pulsar.PulsarException, service_url: str, settings: Settings | None,
            probe: Callable[[], BrokerError | None] | None = None) -> BrokerError:
    """``what`` failed with the client's error ``e``: a BrokerRefused when the broker refuses the client
    (a token it does not accept reaches the client as a timeout, an untrusted certificate as a connect
    error: ``refusal``, or ``probe`` when given), else a BrokerError with the client's error."""
    found = None
    if isinstance(e, pulsar.Timeout | pulsar.ConnectError):
        found = probe() if probe is not None else refusal(service_url, settings, 5.0)
    if isinstance(found, BrokerRefused):
        return BrokerRefused(f"{what}: {found}")
    return BrokerError(f"{what}: {e}")


def ping(service_url: str, topic: str, timeout: float = 5.0, settings: Settings | None = None) -> None:
    """Raise BrokerError unless the broker answers a lookup of ``topic`` within ``timeout``; the
    error says what the broker refused when it refused the client (``refusal``)."""
    c = new_client(service_url, max(1, int(timeout)), settings)
    try:
        c.get_topic_partitions(topic)
    except pulsar.PulsarException as e:
        raise refusal(service_url, settings, timeout) or BrokerError(f"Pulsar broker {service_url} unreachable: {e}"
                                                                     ) from None
    finally:
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
