"""Message positions and hybrid timestamps, encoded as Milvus encodes them."""

from __future__ import annotations

import struct
import time

LOGICAL_BITS = 18


def kafka_msg_id(offset: int) -> bytes:
    """A Kafka MsgPosition.msgID: the record offset as 8 little-endian bytes."""
    return struct.pack("<q", offset)


def kafka_offset(msg_id: bytes) -> int:
    """The Kafka offset stored in a MsgPosition.msgID."""
    if len(msg_id) != 8:
        raise ValueError(f"a Kafka msgID is 8 bytes, got {len(msg_id)}: {msg_id.hex()}")
    return struct.unpack("<q", msg_id)[0]


def compose_ts(physical_ms: int, logical: int = 0) -> int:
    """Hybrid TSO: ``(ms << 18) | logical``."""
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def now_ts(logical: int = 0) -> int:
    return compose_ts(int(time.time() * 1000), logical)
