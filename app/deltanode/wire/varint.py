"""Protobuf base-128 varints, for the few fields DeltaNode reads or writes by hand (a watch
state in the fence, a Pulsar MessageIdData in a position)."""

from __future__ import annotations


def encode_varint(value: int) -> bytes:
    """``value`` as protobuf writes it; a negative int32/int64 takes ten bytes."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos:]`` and the position after it; ValueError when truncated."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos
