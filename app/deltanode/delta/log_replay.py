"""The live files of a table with their stats and deletion vectors, read from its Delta log.

delta-rs 1.6.6 gives neither an add action's stats text nor its deletion vector descriptor:
``get_add_actions`` has no ``deletionVector`` column, and ``DeltaTable.deletion_vectors()``
gives each file's keep mask, already read. A
writer needs the descriptors themselves: a new DV is the union of the file's current one and the
new deletions (``deletion_vectors.union``), and the ``remove`` action of the replaced logical
file must carry the old descriptor (a logical file is its path and its DV). So this replays the
log through pyarrow's filesystem: the newest classic checkpoint at or before the version (single
or multi-part parquet; only the ``add.path`` and ``add.deletionVector`` columns are read), then
the JSON versions after it. V2 (UUID-named) checkpoints are refused: DeltaNode's tables do not
enable them.
"""

from __future__ import annotations

import re

import pyarrow.parquet as pq
from pyarrow import fs as pafs

from ..failure.errors import DeltaNodeError
from . import json_codec
from .actions import AddFile
from .deletion_vectors import DeletionVector

LOG_DIR = "_delta_log"
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_CHECKPOINT_ADD_COLUMNS = ("path", "size", "stats", "deletionVector", "tags")
_V2_CHECKPOINT = re.compile(r"^\d{20}\.checkpoint\.[0-9a-f-]{36}\.(parquet|json)$")


class UnsupportedCheckpoint(DeltaNodeError):
    """A checkpoint format this replay does not read (V2 checkpoints with sidecars)."""


def live_adds(filesystem: pafs.FileSystem, table_root: str, version: int | None = None) -> dict[str, AddFile]:
    """Each live file, by path (as the log writes it), at ``version`` (default: the newest), as
    the ``add`` that made it live. ``table_root`` is the table's path in ``filesystem``."""
    log = f"{table_root.rstrip('/')}/{LOG_DIR}"
    start, parts = _checkpoint(filesystem, log, version)
    files = _read_checkpoint(filesystem, parts)
    current = start
    while version is None or current < version:
        actions = _read_version(filesystem, log, current + 1)
        if actions is None:
            if version is not None:
                raise FileNotFoundError(f"{log}: version {current + 1} missing (asked for {version})")
            break
        current += 1
        apply_actions(files, actions)
    return files


def apply_actions(files: dict[str, AddFile], actions: list[dict]) -> None:
    """One version: its removes, then its adds (a version may remove a file with one DV and add
    it back with another; the actions of a version are unordered)."""
    for action in actions:
        remove = action.get("remove")
        if remove is not None and remove["path"] in files and \
                _unique_id(files[remove["path"]].deletion_vector) == _unique_id(_descriptor(remove)):
            del files[remove["path"]]
    for action in actions:
        add = action.get("add")
        if add is not None:
            files[add["path"]] = _live(add)


def _live(add: dict) -> AddFile:
    return AddFile.of_action(add, _descriptor(add))


def _descriptor(action: dict) -> DeletionVector | None:
    found = action.get("deletionVector")
    return None if found is None else DeletionVector.from_json(found)


def _unique_id(descriptor: DeletionVector | None) -> str | None:
    return None if descriptor is None else descriptor.unique_id


def _read_version(filesystem: pafs.FileSystem, log: str, version: int) -> list[dict] | None:
    try:
        with filesystem.open_input_stream(f"{log}/{version:020d}.json") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return json_codec.read_lines(data)


def _checkpoint(filesystem: pafs.FileSystem, log: str, version: int | None) -> tuple[int, list[str]]:
    """(version, part paths) of the newest checkpoint at or before ``version``; (-1, []) if none.
    ``_last_checkpoint`` answers unless ``version`` is older than it; then the log is listed."""
    last = _last_checkpoint(filesystem, log)
    if last is not None and (version is None or last["version"] <= version):
        if "v2Checkpoint" in last:
            raise UnsupportedCheckpoint(f"{log}: V2 checkpoint at version {last['version']}")
        v, n = last["version"], last.get("parts")
        if n is None:
            return v, [f"{log}/{v:020d}.checkpoint.parquet"]
        return v, [f"{log}/{v:020d}.checkpoint.{i:010d}.{n:010d}.parquet" for i in range(1, n + 1)]
    return _listed_checkpoint(filesystem, log, version)


def _last_checkpoint(filesystem: pafs.FileSystem, log: str) -> dict | None:
    try:
        with filesystem.open_input_stream(f"{log}/_last_checkpoint") as f:
            return json_codec.loads(f.read())
    except FileNotFoundError:
        return None


def _listed_checkpoint(filesystem: pafs.FileSystem, log: str, version: int | None) -> tuple[int, list[str]]:
    """The newest complete classic checkpoint at or before ``version``, from a listing of ``log``."""
    found: dict[tuple[int, int], list[str]] = {}   # (version, parts) -> part paths
    for info in filesystem.get_file_info(pafs.FileSelector(log)):
        if _V2_CHECKPOINT.match(info.base_name):
            raise UnsupportedCheckpoint(f"{info.path}: V2 checkpoint")
        m = _CHECKPOINT.match(info.base_name)
        if m is not None and (version is None or int(m[1]) <= version):
            found.setdefault((int(m[1]), int(m[3] or 1)), []).append(info.path)
    complete = [key for key, paths in found.items() if len(paths) == key[1]]
    if not complete:
        return -1, []
    best = max(complete)
    return best[0], sorted(found[best])


def _read_checkpoint(filesystem: pafs.FileSystem, parts: list[str]) -> dict[str, AddFile]:
    files: dict[str, AddFile] = {}
    for part in parts:
        with filesystem.open_input_file(part) as f:
            checkpoint = pq.ParquetFile(f)
            # A writer may leave out the tags when no add has any.
            columns = [c for c in _CHECKPOINT_ADD_COLUMNS if c in checkpoint.schema_arrow.field("add").type.names]
            adds = checkpoint.read(columns=[f"add.{c}" for c in columns]).column("add")
        for add in adds.to_pylist():
            if add is not None:
                files[add["path"]] = _live(add)
    return files
