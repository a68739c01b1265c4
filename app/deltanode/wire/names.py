"""Milvus channel naming, and the checks that keep hostile names out of storage paths."""

from __future__ import annotations

import re

from ..failure.errors import BadInput

# Letters, digits, '-', '_' and '.' (not leading): what Milvus generates, and nothing
# that can climb out of a directory ('..', '/', '\\', NUL, ':').
_SAFE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}$")
_VCHANNEL = re.compile(r"^(?P<pchannel>.+)_(?P<collection>\d+)v(?P<shard>\d+)$")


class UnsafeNameError(BadInput):
    """A channel or collection name that could escape storage.root as a path."""


def check_safe(kind: str, name: str) -> str:
    """Return ``name`` if it is safe to use as one path segment, else raise UnsafeNameError."""
    if not isinstance(name, str) or not _SAFE.match(name) or ".." in name:
        raise UnsafeNameError(
            f"refused {kind} name {name!r}: only letters, digits, '_', '-' and '.' are allowed "
            f"(no '..', no path separators), at most 255 characters")
    return name


def vchannel_name(pchannel: str, collection_id: int, shard: int) -> str:
    """``{pchannel}_{collectionID}v{shard}``, as rootcoord names virtual channels."""
    return f"{pchannel}_{collection_id}v{shard}"


def pchannel_name(prefix: str, index: int) -> str:
    """``{cluster}-rootcoord-dml_{i}``; ``prefix`` is e.g. ``by-dev-rootcoord-dml``."""
    return f"{prefix}_{index}"


def pchannel_of(vchannel: str) -> str:
    """The physical channel (topic) that carries ``vchannel``: the name cut at its last '_'."""
    m = _VCHANNEL.match(vchannel)
    if not m:
        raise ValueError(f"{vchannel!r} is not a virtual channel name ({{pchannel}}_{{collectionID}}v{{shard}})")
    return m.group("pchannel")
