"""Reads the broker leaves unserved while it answers their partitions' watermarks (driver).

A read the broker did not serve (nothing for its stall timeout although the broker said the range
holds messages, or a connection lost under it) leaves its vchannels waiting where they stand, as the
broker not answering (``FailureKind.BROKER_UNREACHABLE``, whose action is a retry), and a later
cycle reads the range again. A broker can, though, answer a partition's watermark and still deliver
none of its messages, for as long as it likes: Kafka's readers (``read_committed``) stop at the last
stable offset, below the first message of a transaction that is still open, and a transaction its
producer never ends holds it there until the broker aborts it; a Pulsar topic whose ledger the
bookies do not serve. Waiting would never end, with the node telling of an outage of a broker that
answers.

So after a job, the broker is asked for the watermark of each partition some read of it left
unserved, within ``PROBE_TIMEOUT``. A partition that is answered counts one more cycle; after
``STALLS_TO_FAIL`` such cycles in a row its unserved reads fail their vchannels, with a
``BrokerError`` naming the partition and the offset the read stood at. A partition the broker
does not answer for is an outage, waited for, and its count starts again, as it does for one whose
reads in a cycle were all served. A failed vchannel is loaded again after its backoff, and fails
again at its first unserved read while the count stands.
"""

from __future__ import annotations

import logging
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace

from ..failure.classify import Failure
from ..failure.kinds import Action, FailureKind
from ..mq.broker import BrokerError, HighWatermarks
from ..records import ReadStats, TaskOutput
from .watermark_probe import ask_highs

__all__ = ["PROBE_TIMEOUT", "STALLS_TO_FAIL", "StalledReads"]

log = logging.getLogger(__name__)
STALLS_TO_FAIL = 3     # cycles in a row of unserved reads of a partition whose watermark is answered
PROBE_TIMEOUT = 5.0    # seconds the broker is given to answer the unserved partitions' watermarks


class StalledReads:
    """Runs on the driver, in the pipeline's loop (``CycleRunner._wait``): per partition, the cycles
    in a row whose reads of it went unserved while the broker answered its watermark."""

    def __init__(self, limit: int = STALLS_TO_FAIL) -> None:
        self.limit = limit
        self._counts: dict[tuple[str, int], int] = {}

    def judge(self, outputs: list[TaskOutput], watermarks: HighWatermarks | None) -> list[TaskOutput]:
        """``outputs`` of a cycle's job, the unserved reads of a partition at its ``limit``-th cycle
        in a row failing with a ``BrokerError``; ``watermarks`` answers for the partitions."""
        unserved = _unserved(outputs)
        for key in {(r.pchannel, r.partition) for out in outputs for r in out.reads} - unserved.keys():
            self._counts.pop(key, None)   # every read of it served: the count starts again
        if not unserved:
            return outputs
        highs = _ask(watermarks, sorted(unserved))
        failing: dict[Failure, Failure] = {}   # the reads' errors -> what they fail with
        for key, reads in unserved.items():
            high = highs.get(key)
            if not isinstance(high, int):
                self._counts.pop(key, None)   # not answered: the broker is away, which is waited for
                continue
            count = self._counts[key] = self._counts.get(key, 0) + 1
            if count < self.limit:
                continue
            for read in reads:
                assert read.error is not None
                failing[read.error] = Failure(kind=FailureKind.BROKER, message=(
                    f"{key[0]}[{key[1]}]: the broker answers its watermark ({high}) but served none of the reads "
                    f"of it in {count} cycles in a row (this one from offset {read.first}): {read.error.message}"))
        if not failing:
            return outputs
        log.debug("reads failing their vchannels: %s", sorted(e.message for e in failing.values()))
        return [_failed(out, failing) for out in outputs]


def _unserved(outputs: list[TaskOutput]) -> dict[tuple[str, int], list[ReadStats]]:
    """The job's reads the broker did not serve, by partition."""
    found: dict[tuple[str, int], list[ReadStats]] = {}
    for out in outputs:
        for read in out.reads:
            if read.error is not None and read.error.action is Action.RETRY:
                found.setdefault((read.pchannel, read.partition), []).append(read)
    return found


def _ask(watermarks: HighWatermarks | None, keys: list[tuple[str, int]]) -> dict:
    """The broker's answers for ``keys`` within ``PROBE_TIMEOUT`` (none when it is not asked or late)."""
    if watermarks is None:
        return {}
    try:
        return ask_highs(watermarks, keys, PROBE_TIMEOUT).result(timeout=PROBE_TIMEOUT)
    except (FutureTimeout, BrokerError):
        return {}


def _failed(out: TaskOutput, failing: dict[Failure, Failure]) -> TaskOutput:
    """``out`` with the errors of ``failing`` replaced, in its reads and in its portions (a read's
    vchannels that saw messages of their own carry its error in theirs)."""
    if not any(r.error in failing for r in out.reads):
        return out
    reads = tuple(replace(r, error=failing[r.error]) if r.error in failing else r for r in out.reads)
    portions = tuple(replace(p, error=failing[p.error]) if p.error in failing else p for p in out.portions)
    return replace(out, reads=reads, portions=portions)
