"""A live binlog's one row group as Parquet bytes, encoded without pyarrow's writer (executor).

Why: at 1,000 and 10,000 vchannels a cycle writes about one small binlog (one 50-row insert)
per vchannel with data, and pyarrow's ``ParquetWriter`` spends most of such a file on its own
set-up (its constructor, ``write_table`` and ``close``), of which the encoding of a 50-row x
128-dim file's 26 KB is a small part. Encoded here, from the writer's arrays without a Table (no
copy of a one-chunk column, no flatten of a list array that is not a slice, pages joined once)
and with footers and page headers kept, such a file costs about a third of what pyarrow's
writer does (``deltanode_bench.task_cpu``; docs/benchmarks.md, "Where the time went"). This
module writes the file: one data page per column, PLAIN values, RLE levels, no compression and no
statistics (a live binlog's add action carries its min/max, and the compactor writes the
files it merges a segment's small ones into with every option).

What a file holds is what pyarrow writes for the same schema: the footer's schema elements,
its ``ARROW:schema`` (so readers see the table's Arrow types, ``element`` names and all) and
its format version are taken from a file pyarrow wrote with the schema and no rows (once per
schema and Python worker). Only what is simple to get right is encoded here: columns of
booleans, integers, floats, strings or binaries, and lists of those (vectors, Array fields),
with no null anywhere and no empty list. For anything else ``encode`` returns None and the
caller writes the file with pyarrow: the fast path never decides what a file means.

Thrift compact protocol and Parquet's page layout: docs/parquet-encoding.md.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"
# Footers an encoder keeps, by row count and page sizes: each is about the size of what the
# encoder keeps itself (the schema and ARROW:schema), and a worker keeps an encoder per schema.
FOOTERS_KEPT = 4
CREATED_BY = b"deltanode plain_parquet version 1"

# Parquet's enums (parquet.thrift)
_PHYSICAL = {"BOOLEAN": 0, "INT32": 1, "INT64": 2, "FLOAT": 4, "DOUBLE": 5, "BYTE_ARRAY": 6}
_PLAIN, _RLE = 0, 3
_UNCOMPRESSED, _DATA_PAGE = 0, 0

# Thrift compact protocol's field types
_I32, _I64, _BINARY, _LIST, _STRUCT = 5, 6, 8, 9, 12


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_ONE_BYTE = tuple(bytes([i]) for i in range(0x80))


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _skip(buf: bytes, pos: int, ftype: int) -> int:
    """The position after a compact-protocol value of ``ftype`` starting at ``pos``."""
    if ftype in (1, 2):          # booleans: in the field header
        return pos
    if ftype == 3:               # byte
        return pos + 1
    if ftype in (4, 5, 6):       # zigzag varints
        return _read_varint(buf, pos)[1]
    if ftype == 7:               # double
        return pos + 8
    if ftype == _BINARY:
        n, pos = _read_varint(buf, pos)
        return pos + n
    if ftype in (_LIST, 10):     # list, set
        head = buf[pos]
        pos += 1
        n, elem = head >> 4, head & 0x0F
        if n == 15:
            n, pos = _read_varint(buf, pos)
        for _ in range(n):
            pos = _skip(buf, pos, elem) if elem not in (1, 2) else pos + 1
        return pos
    if ftype == 11:              # map
        n, pos = _read_varint(buf, pos)
        if n == 0:
            return pos
        types = buf[pos]
        pos += 1
        for _ in range(n):
            pos = _skip(buf, pos, types >> 4)
            pos = _skip(buf, pos, types & 0x0F)
        return pos
    if ftype == _STRUCT:
        return _struct_fields(buf, pos, {})
    raise ValueError(f"unknown thrift compact type {ftype}")


def _struct_fields(buf: bytes, pos: int, fields: dict[int, tuple[int, bytes]]) -> int:
    """Reads a struct at ``pos`` into ``fields`` (id -> (type, its value's raw bytes)); the end."""
    fid = 0
    while True:
        head = buf[pos]
        pos += 1
        if head == 0:
            return pos
        delta, ftype = head >> 4, head & 0x0F
        if delta:
            fid += delta
        else:
            raw, pos = _read_varint(buf, pos)
            fid = (raw >> 1) ^ -(raw & 1)
        start = pos
        pos = _skip(buf, pos, ftype)
        fields[fid] = (ftype, buf[start:pos] if ftype not in (1, 2) else b"")


@dataclass(frozen=True)
class _Leaf:
    """One column of the schema as a parquet leaf: a flat column, or a list of a flat type."""

    physical: int
    is_list: bool
    arrow_type: pa.DataType   # the column's Arrow type
    value_type: pa.DataType   # the flat values' Arrow type
    meta_head: bytes          # its ColumnMetaData's type, encodings, path and codec: the same in every file


def _field(delta: int, ftype: int, value: bytes) -> bytes:
    """A field ``delta`` ids after the previous one (1-15), with its value encoded."""
    return bytes([(delta << 4) | ftype]) + value


@dataclass(frozen=True)
class PlainEncoder:
    """Writes tables of one schema; made by ``for_schema``.

    The footer's parts that are the same in every file are encoded once (``head``, ``tail``,
    each leaf's ``meta_head``); a file adds its sizes, offsets and counts (building every
    field for each file costs as much as pyarrow's whole writer), and a footer
    is kept for the next file of the same row count and page sizes: with fixed-width columns
    (an Int64 key, vectors) that is every live binlog of one insert.
    """

    leaves: tuple[_Leaf, ...]
    head: bytes   # FileMetaData up to num_rows: version and schema
    tail: bytes   # FileMetaData after row_groups: key-value metadata, created_by, column orders, stop
    _footers: dict[tuple, bytes] = field(default_factory=dict, compare=False, repr=False)   # ``encode_columns``

    def encode(self, table: pa.Table) -> bytes | None:
        """Runs on an executor: ``table`` as a parquet file of one row group, or None when its data
        is not of the kinds this module encodes (a null, an empty list): pyarrow writes it then."""
        return self.encode_columns(table.columns, table.num_rows)

    def encode_columns(self, columns: Sequence[pa.Array | pa.ChunkedArray], n: int) -> bytes | None:
        """Runs on an executor: ``encode`` for the schema's columns of ``n`` rows, in its order,
        without a Table around them (a live binlog's writer has the arrays)."""
        if n == 0 or len(columns) != len(self.leaves):
            return None
        parts = [MAGIC]
        sizes, counts = [], []
        for leaf, column in zip(self.leaves, columns):
            page = _page(leaf, column, n)
            if page is None:
                return None
            pieces, size, count = page
            parts += pieces
            sizes.append(size)
            counts.append(count)
        # The footer depends only on the row count and each page's size and values: files of a
        # schema without strings all have the same one for the same row count.
        key = (n, tuple(sizes), tuple(counts))
        footer = self._footers.get(key)
        if footer is None:
            if len(self._footers) >= FOOTERS_KEPT:
                self._footers.clear()
            footer = self._footers[key] = self._footer(n, sizes, counts)
        parts.append(footer)
        return b"".join(parts)

    def _footer(self, n: int, sizes: list[int], counts: list[int]) -> bytes:
        """FileMetaData of one row group whose column chunks are pages of ``sizes`` bytes holding
        ``counts`` values, one after the other from the file's start; its length, and the magic."""
        at = len(MAGIC)
        chunks = []
        for leaf, page_size, values in zip(self.leaves, sizes, counts):
            size = _zigzag(page_size)
            offset = _zigzag(at)
            meta = b"".join((leaf.meta_head, _field(1, _I64, _zigzag(values)), _field(1, _I64, size),
                             _field(1, _I64, size), _field(2, _I64, offset), b"\x00"))
            chunks.append(b"".join((_field(2, _I64, offset), _field(1, _STRUCT, meta), b"\x00")))
            at += page_size
        total = _zigzag(at - len(MAGIC))
        group = b"".join((_field(1, _LIST, _list_header(len(chunks), _STRUCT)), *chunks, _field(1, _I64, total),
                          _field(1, _I64, _zigzag(n)), _field(2, _I64, _zigzag(len(MAGIC))),
                          _field(1, _I64, total), b"\x00"))
        footer = b"".join((self.head, _field(1, _I64, _zigzag(n)), _field(1, _LIST, _list_header(1, _STRUCT)), group,
                           self.tail))
        return footer + struct.pack("<I", len(footer)) + MAGIC


def _list_header(n: int, elem_type: int) -> bytes:
    return bytes([(n << 4) | elem_type]) if n < 15 else bytes([0xF0 | elem_type]) + _varint(n)


_Page = tuple[tuple[bytes, bytes, bytes], int, int]   # (header, levels, values), size, number of values


def _page(leaf: _Leaf, column: pa.Array | pa.ChunkedArray, n: int) -> _Page | None:
    """One data page of ``column`` (its header, levels and values, joined once with the file's
    other parts), its size and its number of values; or None."""
    if column.type != leaf.arrow_type:
        return None   # not the schema's column: pyarrow's writer says what is wrong with it
    if isinstance(column, pa.ChunkedArray):
        # combine_chunks copies even a single chunk: a 50 x 128-dim vector column's 25 KB
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if column.null_count:
        return None
    if leaf.is_list:
        offsets = column.offsets.to_numpy()
        lengths = np.diff(offsets)
        if lengths.min() < 1:
            return None   # an empty list: a level layout of its own
        # An array that is not a slice holds exactly its lists' values: no flatten (a compute call)
        values = column.values if column.offset == 0 and offsets[0] == 0 and offsets[-1] == len(column.values) \
            else column.flatten()
        if values.null_count:
            return None
        count = len(values)
        if lengths.max() == lengths.min():   # vectors: every row alike
            levels = _vector_levels(int(lengths[0]), n)
        else:
            levels = _with_length(b"".join(_row_levels(int(k)) for k in lengths.tolist())) + _levels(count, 3)
    else:
        values, count = column, n
        levels = _levels(n, 1)
    body = _plain(leaf, values)
    header = _page_header(count, len(levels) + len(body))
    return (header, levels, body), len(header) + len(levels) + len(body), count


@functools.lru_cache(maxsize=4096)
def _page_header(count: int, size: int) -> bytes:
    """PageHeader: type DATA_PAGE, uncompressed and compressed sizes, DataPageHeader (num_values,
    PLAIN values, RLE definition and repetition levels)."""
    size_field = _field(1, _I32, _zigzag(size))
    return b"".join((_field(1, _I32, _zigzag(_DATA_PAGE)), size_field, size_field,
                     _field(2, _STRUCT, _field(1, _I32, _zigzag(count)) + _DATA_PAGE_ENCODINGS), b"\x00"))


_DATA_PAGE_ENCODINGS = b"".join((_field(1, _I32, _zigzag(_PLAIN)), _field(1, _I32, _zigzag(_RLE)),
                                 _field(1, _I32, _zigzag(_RLE)), b"\x00"))


@functools.lru_cache(maxsize=4096)
def _row_levels(length: int) -> bytes:
    """A list's repetition levels: 0 for its first value, 1 for the others (two RLE runs)."""
    first = _varint(1 << 1) + b"\x00"
    return first if length == 1 else first + _varint((length - 1) << 1) + b"\x01"


@functools.lru_cache(maxsize=4096)
def _vector_levels(length: int, rows: int) -> bytes:
    """The levels of ``rows`` lists of ``length`` values each."""
    return _with_length(_row_levels(length) * rows) + _levels(length * rows, 3)


@functools.lru_cache(maxsize=4096)
def _levels(count: int, level: int) -> bytes:
    """``count`` definition levels all at ``level`` (no nulls): one RLE run."""
    return _with_length(_varint(count << 1) + bytes([level]))


def _with_length(levels: bytes) -> bytes:
    return struct.pack("<I", len(levels)) + levels


def _plain(leaf: _Leaf, values: pa.Array) -> bytes:
    """PLAIN-encoded values (no nulls)."""
    t = leaf.value_type
    if pa.types.is_boolean(t):
        return np.packbits(values.to_numpy(zero_copy_only=False), bitorder="little").tobytes()
    if pa.types.is_string(t) or pa.types.is_binary(t):
        _, offsets_buffer, data = values.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int32)[values.offset:values.offset + len(values) + 1]
        raw = memoryview(data) if data is not None else memoryview(b"")
        return b"".join(struct.pack("<I", b - a) + raw[a:b] for a, b in zip(offsets[:-1].tolist(),
                                                                            offsets[1:].tolist()))
    array = values.to_numpy(zero_copy_only=True)
    if leaf.physical == _PHYSICAL["INT32"] and array.dtype.itemsize != 4:
        array = array.astype("<i4")   # int8, int16: INT32 on disk
    return array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


_FLAT = (pa.types.is_boolean, pa.types.is_int8, pa.types.is_int16, pa.types.is_int32, pa.types.is_int64,
         pa.types.is_float32, pa.types.is_float64, pa.types.is_string, pa.types.is_binary)


def _flat(t: pa.DataType) -> bool:
    return any(check(t) for check in _FLAT)


@functools.lru_cache(maxsize=1 << 15)   # as binlog_writer's formats: one per schema a worker writes
def empty_file(schema: pa.Schema) -> tuple[bytes, pq.ParquetSchema]:
    """Runs on an executor: the file pyarrow writes for ``schema`` and no rows, and its parquet
    schema (the leaves' paths, types and levels); ``binlog_writer`` takes its leaf paths too."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    data = sink.getvalue().to_pybytes()
    return data, pq.ParquetFile(pa.BufferReader(data)).schema


@functools.lru_cache(maxsize=1 << 15)
def for_schema(schema: pa.Schema) -> PlainEncoder | None:
    """Runs on an executor: the encoder of ``schema``, or None when a column is of a kind this
    module does not write (maps, structs, nested lists, unsigned or 64-bit-offset types...)."""
    template, parquet_schema = empty_file(schema)
    if len(parquet_schema) != len(schema):
        return None   # a column of more than one leaf (a map)
    leaves = []
    for i, column_field in enumerate(schema):
        t = column_field.type
        is_list = pa.types.is_list(t)
        value_type = t.value_type if is_list else t
        if not _flat(value_type):
            return None
        column = parquet_schema.column(i)
        physical = _PHYSICAL.get(column.physical_type)
        if physical is None or (column.max_definition_level, column.max_repetition_level) != ((3, 1) if is_list
                                                                                              else (1, 0)):
            return None   # not nullable as every DeltaNode column is (a REQUIRED column's levels differ)
        name = column_field.name.encode()
        path = (name, b"list", b"element") if is_list else (name,)
        if column.path != ".".join(p.decode() for p in path):
            return None   # pyarrow named the leaf otherwise (or the name holds a dot)
        # ColumnMetaData's type, encodings (PLAIN, RLE), path in schema and codec
        meta_head = b"".join((_field(1, _I32, _zigzag(physical)),
                              _field(1, _LIST, _list_header(2, _I32) + _zigzag(_PLAIN) + _zigzag(_RLE)),
                              _field(1, _LIST, _list_header(len(path), _BINARY)
                                     + b"".join(_varint(len(p)) + p for p in path)),
                              _field(1, _I32, _zigzag(_UNCOMPRESSED))))
        leaves.append(_Leaf(physical, is_list, t, value_type, meta_head))
    length = struct.unpack("<I", template[-8:-4])[0]
    fields: dict[int, tuple[int, bytes]] = {}
    _struct_fields(template, len(template) - 8 - length, fields)
    if not {1, 2, 5} <= fields.keys():
        return None
    head = _field(1, *fields[1]) + _field(1, *fields[2])
    # after num_rows (3) and row_groups (4), which encode writes
    tail = _field(1, *fields[5]) + _field(1, _BINARY, _varint(len(CREATED_BY)) + CREATED_BY)
    if 7 in fields:
        tail += _field(1, *fields[7])
    return PlainEncoder(tuple(leaves), head, tail + b"\x00")
