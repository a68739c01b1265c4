"""Executor side: bounded reads of Pulsar position ranges (``read_ranges``), and the client a
Python worker keeps for them (``client``).

Between ledgers (a rollover, or a topic's first ledger, whose id the broker allocates) positions
jump: a read that meets entry 0 of a later ledger knows no message lies in between, and when that
is past its range's end it reports the next position (``Gap``) so the vchannel moves over the gap
at once.

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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pulsar

from ..wire.positions import PULSAR_ENTRY_BITS as ENTRY_BITS
from ..wire.positions import pulsar_ledger_entry_at
from .pulsar_client import Settings, new_client, unanswered
from .pulsar_positions import message_id, position, topic_name
from .types import BrokerError, BrokerUnreachable, Chunk, Gap, OffsetRange

__all__ = ["OPEN_AHEAD", "RECEIVER_QUEUE", "RECREATE_AFTER", "REREADS", "STALL_TIMEOUT", "client", "read_ranges"]

REREADS = 5              # attempts to fill a hole inside a ledger before the range fails
# A reader that delivers nothing for this long although its range holds messages is replaced by a
# new one at the same position, before the stall timeout gives the range up.
RECREATE_AFTER = 5.0
# Seconds a range may deliver nothing before its read gives up (a ``BrokerUnreachable``: the broker
# went away under it); its vchannels then wait where they stand and the next cycles read it again,
# unless the broker answers the topic's watermark through a few such cycles (``pipeline.read_stalls``).
STALL_TIMEOUT = 20.0
# Messages a reader prefetches (mq.pulsar.receiver.queue.size). Apache Pulsar delivers a full queue
# once each and in order, so the Python loop reads from memory instead of waiting a round trip per
# message (docs/pulsar.md).
RECEIVER_QUEUE = 1000
OPEN_AHEAD = 4   # readers opened beside the one being read (read_ranges)
log = logging.getLogger(__name__)
_clients: dict[tuple, pulsar.Client] = {}   # per process (a Spark Python worker reads many tasks)


def client(service_url: str, settings: Settings | None = None) -> pulsar.Client:
    """This process's client of ``service_url`` with ``settings``, made on first use: every range
    read of the process shares it."""
    key = (service_url, tuple(sorted((settings or {}).items())))
    found = _clients.get(key)
    if found is None:
        found = _clients[key] = new_client(service_url, settings=settings)
    return found


def close_idle() -> int:
    """Close this process's clients; how many. The next read makes a client afresh (``client``)."""
    closed = 0
    while _clients:
        _clients.popitem()[1].close()
        closed += 1
    return closed


def read_ranges(service_url: str, ranges: list[OffsetRange], *, tenant: str = "public", namespace: str = "default",
                chunk_messages: int = 64, stall_timeout: float = STALL_TIMEOUT,
                settings: Settings | None = None) -> Iterator[tuple[int, Chunk | Gap | BrokerError]]:
    """Yield ``(i, chunk)``: lists of ``(position, payload, properties)`` of ``ranges[i]`` (``types.Chunk``)
    in order, one range after another; a range the broker cannot serve yields ``(i, BrokerError)``
    once (a ``BrokerUnreachable`` when it did not answer), a range that ends in a gap ``(i, Gap)`` last.

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
            return unanswered(f"cannot read {topic} at {r.start}", e)

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
    """Read ``r`` (``ranges[i]``) with ``reader``, opened at its start; closes the reader."""
    if isinstance(reader, BrokerError):
        yield i, reader
        return
    expected, rereads, recreated = r.start, 0, 0
    chunk: Chunk = []
    last_progress = time.monotonic()
    try:
        while expected < r.end:
            try:
                msg = reader.read_next(500)
            except pulsar.Timeout:
                silent = time.monotonic() - last_progress
                if silent > stall_timeout:
                    yield i, BrokerUnreachable(f"no message from {topic} at position {expected} for "
                                               f"{stall_timeout:.0f} s (range ends at {r.end})")
                    return
                if silent > RECREATE_AFTER * (recreated + 1):
                    recreated += 1
                    reader = _reopen(c, reader, topic, expected, silent, _queue(queue_size, r))
                continue
            mid = msg.message_id()
            pos = position(mid.ledger_id(), mid.entry_id())
            if pos < expected:
                continue   # delivered twice
            if pos > expected:
                ahead = _ahead(topic, r.end, expected, pos, rereads)
                if isinstance(ahead, Gap | BrokerError):   # the range ends here
                    if chunk and isinstance(ahead, Gap):
                        yield i, chunk
                    yield i, ahead
                    return
                if not ahead:
                    rereads += 1
                    reader.seek(message_id(expected))   # a skipped delivery: read again from the hole
                    continue
            chunk.append((pos, msg.data(), msg.properties() or None))
            expected, rereads, last_progress = pos + 1, 0, time.monotonic()
            if len(chunk) >= chunk_messages:
                yield i, chunk
                chunk = []
        if chunk:
            yield i, chunk
    except pulsar.PulsarException as e:
        yield i, unanswered(f"reading {topic} at {expected}", e)
    finally:
        _close_quietly(reader)


def _ahead(topic: str, end: int, expected: int, pos: int, rereads: int) -> bool | Gap | BrokerError:
    """What a message at ``pos`` past ``expected`` means for a range ending at ``end``:

    True: it is the first entry of a later ledger inside the range, so nothing lies in between and
    the read goes on from it. False: a delivery skipped inside the ledger, to read again from
    ``expected`` (``rereads`` times so far). Gap: the next ledger starts past the range's end, which
    is done. BrokerError: a later ledger not from its first entry, or a hole never delivered; a
    skipped position would be a lost message.
    """
    if pos >> ENTRY_BITS > expected >> ENTRY_BITS:
        ledger, entry = pulsar_ledger_entry_at(pos)
        if entry != 0:
            return BrokerError(f"{topic}: after position {expected} came entry {entry} of a "
                               f"later ledger {ledger}, not its first: refusing to skip data")
        return Gap(position=pos) if pos >= end else True
    if rereads >= REREADS:
        ledger, hole = pulsar_ledger_entry_at(expected)
        return BrokerError(f"{topic}: entry {hole} of ledger {ledger} never delivered ({REREADS} re-reads from it)")
    return False


def _reopen(c: pulsar.Client, reader: pulsar.Reader, topic: str, expected: int, silent: float,
            queue: int) -> pulsar.Reader:
    """A new reader at ``expected`` in place of ``reader``, silent for ``silent`` seconds although its
    range holds messages (a broker may have lost track of it)."""
    log.info("%s: no delivery at position %d for %.0f s: reading again with a new reader", topic, expected, silent)
    reader.close()
    return c.create_reader(topic, message_id(expected), receiver_queue_size=queue, start_message_id_inclusive=True)
