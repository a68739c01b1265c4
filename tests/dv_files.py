"""Deletion vector files (storage type ``u``) as Spark writes them, for tests of the readers:
DeltaNode itself writes inline DVs only (docs/deletion-vectors.md)."""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pyarrow import fs as pafs

from deltanode.delta.deletion_vectors import (
    FILE_VERSION,
    DeletionVector,
    as_positions,
    positions,
    serialize,
    z85_encode,
)


@dataclass(frozen=True, kw_only=True)
class DvFile:
    """A DV file to write at ``path`` (relative to the table root): ``data`` holds the DVs the
    ``descriptors`` point to, in the order they were given."""

    path: str
    data: bytes
    descriptors: tuple[DeletionVector, ...]


def file(position_sets: Sequence[npt.ArrayLike], *, prefix: str = "", file_id: uuid.UUID | None = None) -> DvFile:
    """A DV file holding one DV per entry of ``position_sets``, and their ``u`` descriptors.
    Writes nothing: the caller puts ``data`` at ``path`` under the table root. ``prefix`` (a few
    characters of the Z85 alphabet without ``/``) makes the file's directory under the root."""
    if "/" in prefix:
        raise ValueError(f"DV prefix {prefix!r} contains '/'")
    file_id = file_id or uuid.uuid4()
    encoded = prefix + z85_encode(file_id.bytes)
    parts, descriptors, offset = [bytes([FILE_VERSION])], [], 1
    for one in position_sets:
        values = as_positions(one)
        data = serialize(values)
        parts += [struct.pack(">I", len(data)), data, struct.pack(">I", zlib.crc32(data))]
        descriptors.append(DeletionVector(storage_type="u", path_or_inline_dv=encoded, offset=offset,
                                          size_in_bytes=len(data), cardinality=int(values.size)))
        offset += len(data) + 8
    name = f"deletion_vector_{file_id}.bin"
    return DvFile(path=f"{prefix}/{name}" if prefix else name, data=b"".join(parts), descriptors=tuple(descriptors))


def write_file(position_sets: Sequence[npt.ArrayLike], table_root: str, filesystem: pafs.FileSystem, *,
               prefix: str = "") -> tuple[DeletionVector, ...]:
    """Write one DV file under ``table_root`` (a path in ``filesystem``); its descriptors."""
    out = file(position_sets, prefix=prefix)
    path = f"{table_root.rstrip('/')}/{out.path}"
    if prefix and filesystem.type_name != "s3":
        filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with filesystem.open_output_stream(path) as f:
        f.write(out.data)
    return out.descriptors


def union(old: DeletionVector | None, new_positions: npt.ArrayLike, table_root: str = "",
          filesystem: pafs.FileSystem | None = None) -> np.ndarray:
    """The positions of ``old`` (None: no DV yet) and ``new_positions`` together: a file's DV only
    grows. The result's size equals ``old.cardinality`` when nothing new was deleted (then there
    is nothing to commit)."""
    new = as_positions(new_positions)
    if old is None:
        return new
    return np.union1d(positions(old, table_root, filesystem), new)
