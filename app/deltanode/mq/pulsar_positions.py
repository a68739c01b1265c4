"""Pulsar topics and positions as DeltaNode names them (both sides: driver and executor).

Topics are named as Milvus names them, ``persistent://{tenant}/{namespace}/{pchannel}``,
non-partitioned. A position is ``ledgerId << 24 | entryId``: it orders as the message ids do,
and grows by one per message inside a ledger (docs/pulsar.md).
"""

from __future__ import annotations

import pulsar

from ..wire.positions import pulsar_ledger_entry_at, pulsar_position
from .types import BrokerError

__all__ = ["message_id", "position", "topic_name"]


def topic_name(pchannel: str, tenant: str = "public", namespace: str = "default") -> str:
    return f"persistent://{tenant}/{namespace}/{pchannel}"


def position(ledger: int, entry: int) -> int:
    """The int64 position of a message id (docs/pulsar.md)."""
    try:
        return pulsar_position(ledger, entry)
    except ValueError as e:
        raise BrokerError(str(e)) from None


def message_id(pos: int) -> pulsar.MessageId:
    """The message id at ``pos``, as the topic numbers it (partition and batch index -1)."""
    return pulsar.MessageId(-1, *pulsar_ledger_entry_at(pos), -1)
