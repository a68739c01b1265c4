"""Opening, creating and reading DeltaNode's Delta tables."""

from __future__ import annotations

import functools
import os
import tempfile
import time
import urllib.parse
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyarrow import fs as pafs

from . import json_codec
from .layout import TABLE_CONFIG, StorageLayout


def open_table(uri: str, storage_options: dict[str, str] | None = None,
               version: int | None = None) -> DeltaTable | None:
    """``storage_options``: delta-rs's, for an object store (``StorageLayout.delta_options``);
    ``version``: that version of the table (default: the newest)."""
    try:
        return DeltaTable(uri, version=version, storage_options=storage_options)
    except TableNotFoundError:
        return None


def version_zero(schema: pa.Schema) -> bytes:
    """The first version of a new table with ``schema`` (``TABLE_CONFIG``): delta-rs's own
    actions (protocol, metaData, commitInfo), with a table id and times of its own. Written with
    a put if absent (``delta_log.DeltaLog``), it costs what a commit costs; ``DeltaTable.create``
    costs 4 ms of CPU, three times over for each new collection."""
    now = int(time.time() * 1000)
    actions = []
    for action in _version_zero_template(schema):
        if "metaData" in action:
            action = {"metaData": {**action["metaData"], "id": str(uuid.uuid4()), "createdTime": now}}
        elif "commitInfo" in action:
            action = {"commitInfo": {**action["commitInfo"], "timestamp": now}}
        actions.append(action)
    return json_codec.write_lines(actions)


@functools.lru_cache(maxsize=256)
def _version_zero_template(schema: pa.Schema) -> tuple[dict, ...]:
    """Version 0 of a table as delta-rs creates it, once per schema and process (in a scratch directory)."""
    with tempfile.TemporaryDirectory(prefix="deltanode-table-") as scratch:
        DeltaTable.create(scratch, schema, configuration=TABLE_CONFIG)
        with open(os.path.join(scratch, "_delta_log", f"{0:020d}.json"), "rb") as f:
            return tuple(json_codec.read_lines(f.read()))


def read_table(storage: StorageLayout, uri: str, columns: list[str] | None = None,
               version: int | None = None, include_deleted: bool = False) -> pa.Table | None:
    """The rows of the table at ``uri`` (None when there is none yet), read through pyarrow's own
    filesystem for ``uri``. Not ``DeltaTable.to_pyarrow_table()``: that reads through delta-rs's
    filesystem, and a process that did so aborts at its exit in most runs (docs/platform.md).
    Rows that deletion vectors delete are left out (docs/deletion-vectors.md), unless
    ``include_deleted``: then every row the live files hold (everything ever inserted that no
    drop or compaction removed)."""
    table = open_table(uri, storage.delta_options(uri), version)
    if table is None:
        return None
    fs, path = storage.filesystem(uri)
    root = pafs.SubTreeFileSystem(path, fs)
    if not has_deletion_vectors(table):
        return table.to_pyarrow_dataset(filesystem=root).to_table(columns=columns)
    if include_deleted:
        paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
        return _dataset(paths, pa.schema(table.schema().to_arrow()), root).to_table(columns=columns)
    return _read_with_deletion_vectors(table, root, columns)


def has_deletion_vectors(table: DeltaTable) -> bool:
    """Whether the table's protocol lets its files carry deletion vectors (then delta-rs's
    ``to_pyarrow_dataset`` refuses it)."""
    return "deletionVectors" in (table.protocol().reader_features or ())


def _read_with_deletion_vectors(table: DeltaTable, root: pafs.FileSystem, columns: list[str] | None) -> pa.Table:
    """The files without a DV in one pyarrow dataset, those with one in another, scanned batch by
    batch (``scan_batches``: each batch tagged with its file, a file's batches in order) and
    filtered by the file's keep mask. 200 files of 2,000 rows with 32-dim vectors, 100 of them
    with a DV: 116 ms (the same files without DVs: 98 ms; one dataset per DV file: 193 ms;
    DuckDB's delta_scan: 138 ms). Unpartitioned tables only (DeltaNode's)."""
    if table.metadata().partition_columns:
        raise NotImplementedError("reading a partitioned table with deletion vectors")
    masks = _keep_masks(table)
    schema = pa.schema(table.schema().to_arrow())
    paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    unknown = masks.keys() - set(paths)
    if unknown:   # a path spelt differently in the two listings: its rows would be read twice
        raise ValueError(f"deletion vectors of files delta-rs does not list: {sorted(unknown)[:3]}")
    clean = _dataset([p for p in paths if p not in masks], schema, root).to_table(columns=columns)
    batches = clean.to_batches()
    read = dict.fromkeys(masks, 0)
    for tagged in _dataset(list(masks), schema, root).scanner(columns=columns).scan_batches():
        path, batch = tagged.fragment.path, tagged.record_batch
        start = read[path]
        read[path] = start + batch.num_rows
        if read[path] > masks[path].size:
            raise ValueError(f"{path}: more rows than its numRecords ({masks[path].size}, the keep mask's length)")
        batches.append(batch.filter(masks[path][start:read[path]]))
    short = [p for p, n in read.items() if n != masks[p].size]
    if short:
        raise ValueError(f"{short[0]}: {read[short[0]]} rows, its numRecords is {masks[short[0]].size}")
    # From batches: pa.concat_tables drops the rows of tables without columns (columns=[]: a count).
    return pa.Table.from_batches(batches, schema=clean.schema)


def _keep_masks(table: DeltaTable) -> dict[str, np.ndarray]:
    """Keep mask (True: the row is in the table) of each file that has a DV, by its path relative
    to the table. From ``DeltaTable.deletion_vectors()``: delta-rs reads the DVs with
    delta-kernel's reader and sizes each mask by the file's ``numRecords`` (it refuses a DV
    file without it); the process still exits cleanly (10 of 10 runs, where
    ``to_pyarrow_table`` aborted 2 of 10)."""
    base = table.table_uri.rstrip("/") + "/"
    found = pa.table(table.deletion_vectors())
    vectors = found.column("selection_vector").combine_chunks()
    masks = {}
    for i, uri in enumerate(found.column("filepath").to_pylist()):
        if not uri.startswith(base):
            raise NotImplementedError(f"a data file outside the table: {uri}")
        masks[urllib.parse.unquote(uri[len(base):])] = vectors[i].values.to_numpy(zero_copy_only=False)
    return masks


def _dataset(paths: list[str], schema: pa.Schema, root: pafs.FileSystem) -> ds.Dataset:
    fmt = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True))
    return ds.FileSystemDataset([fmt.make_fragment(p, filesystem=root) for p in paths], schema, fmt, root)
