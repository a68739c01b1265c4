"""The records and the error every broker backend speaks in (``kafka``, ``pulsar``, ``broker``).

Positions are 64-bit integers that grow with every message: Kafka offsets, or Pulsar message
ids mapped as docs/pulsar.md says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..failure.errors import DeltaNodeError

__all__ = ["BrokerError", "BrokerRefused", "BrokerUnreachable", "Chunk", "Delivered", "Gap", "OffsetRange",
           "even_cut_points"]

Delivered = Callable[[int, str], None]   # (position, "") once landed; (-1, error) when it failed
# (position, payload, properties) of consecutive messages of one range. Properties (Kafka record
# headers, Pulsar message properties; Milvus 2.6 puts its message's type, time tick, vchannel and
# header there) are None for a message without any, so that the older messages cost nothing more.
Chunk = list[tuple[int, bytes | None, dict[str, str] | None]]


class BrokerError(DeltaNodeError):
    """The broker could not serve a request (unreachable, topic missing, data expired)."""


class BrokerUnreachable(BrokerError):
    """The broker did not answer: down, starting again, paused, or cut off from this process.
    Nothing was refused or lost, and asking again later may succeed."""


class BrokerRefused(BrokerError):
    """The broker answered and refused the client: its login, its token or the broker's certificate.
    Asking again does not help; the message names what to fix."""


@dataclass(frozen=True)
class OffsetRange:
    """The messages of ``topic[partition]`` at positions [start, end).

    Positional as well as keyword: the pipeline's tasks and the tests build it positionally."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True, kw_only=True)
class Gap:
    """Yielded by a range read that found the topic's next message past the range's end: no
    message lies between the range's last one and ``position`` (a Pulsar ledger boundary)."""

    position: int


def even_cut_points(first: int, end: int, parts: int) -> list[int]:
    """``parts - 1`` offsets cutting [first, end) into pieces of about equal messages, for a broker
    where a read can start at any offset."""
    return [first + (end - first) * i // parts for i in range(1, parts)]
