"""Message positions and hybrid timestamps, encoded as Milvus encodes them."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from .varint import encode_varint, read_varint

LOGICAL_BITS = 18


def kafka_msg_id(offset: int) -> bytes:
    """A Kafka MsgPosition.msgID: the record offset as 8 little-endian bytes."""
    return struct.pack("<q", offset)


def kafka_offset(msg_id: bytes) -> int:
    """The Kafka offset stored in a MsgPosition.msgID."""
    if len(msg_id) != 8:
        raise ValueError(f"a Kafka msgID is 8 bytes, got {len(msg_id)}: {msg_id.hex()}")
    return struct.unpack("<q", msg_id)[0]


def pulsar_msg_id(ledger: int, entry: int, partition: int = 0, batch_index: int = 0) -> bytes:
    """A Pulsar MsgPosition.msgID: the proto2 ``MessageIdData`` Milvus 2.3/2.4 store (fields 1-4,
    all set; docs/pulsar.md). ``pulsar.MessageId.deserialize`` reads it."""
    return (b"\x08" + encode_varint(ledger) + b"\x10" + encode_varint(entry) + b"\x18" + encode_varint(partition)
            + b"\x20" + encode_varint(batch_index))


def pulsar_ledger_entry(msg_id: bytes) -> tuple[int, int]:
    """``(ledgerId, entryId)`` of a serialized ``MessageIdData``; other fields are skipped."""
    fields: dict[int, int] = {}
    pos = 0
    while pos < len(msg_id):
        tag, pos = read_varint(msg_id, pos)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            fields[field], pos = read_varint(msg_id, pos)
        elif wire_type == 2:
            length, pos = read_varint(msg_id, pos)
            pos += length
        else:
            raise ValueError(f"not a Pulsar MessageIdData (wire type {wire_type}): {msg_id.hex()}")
    if 1 not in fields or 2 not in fields or pos != len(msg_id):
        raise ValueError(f"not a Pulsar MessageIdData (needs ledgerId and entryId): {msg_id.hex()}")
    return fields[1], fields[2]


PULSAR_ENTRY_BITS = 24
PULSAR_MAX_LEDGER = (1 << (63 - PULSAR_ENTRY_BITS)) - 1


def pulsar_position(ledger: int, entry: int) -> int:
    """DeltaNode's int64 position of a Pulsar message id: ``ledger << 24 | entry`` (docs/pulsar.md)."""
    if not (0 <= entry < 1 << PULSAR_ENTRY_BITS and 0 <= ledger <= PULSAR_MAX_LEDGER):
        raise ValueError(f"Pulsar message id ({ledger}, {entry}) is outside what DeltaNode positions hold "
                         f"(entry < 2^{PULSAR_ENTRY_BITS}, ledger < 2^{63 - PULSAR_ENTRY_BITS})")
    return ledger << PULSAR_ENTRY_BITS | entry


def pulsar_ledger_entry_at(position: int) -> tuple[int, int]:
    return position >> PULSAR_ENTRY_BITS, position & ((1 << PULSAR_ENTRY_BITS) - 1)


@dataclass(frozen=True)
class PositionCodec:
    """How a broker's ``MsgPosition.msgID`` bytes map to DeltaNode's int64 positions and back."""

    to_msg_id: Callable[[int], bytes]
    from_msg_id: Callable[[bytes], int]


CODECS = {
    "kafka": PositionCodec(kafka_msg_id, kafka_offset),
    "pulsar": PositionCodec(lambda pos: pulsar_msg_id(*pulsar_ledger_entry_at(pos)),
                            lambda msg_id: pulsar_position(*pulsar_ledger_entry(msg_id))),
}


def compose_ts(physical_ms: int, logical: int = 0) -> int:
    """Hybrid TSO: ``(ms << 18) | logical``."""
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def now_ts(logical: int = 0) -> int:
    return compose_ts(int(time.time() * 1000), logical)
