"""Compaction of a segment's binlog files: many small files rewritten as few of a target size.

DeltaNode commits every cycle for latency, so a vchannel that receives a few rows a second
adds a small binlog file to its segment every cycle (at 1,000 vchannels, ~45,000 files in two
minutes); readers open every one. Compaction rewrites a segment's small files into files of
``target_bytes``, with a Delta commit that only rearranges data (``OPTIMIZE``: ``remove`` and
``add`` with ``dataChange = false``, no ``txn``). Rules:

- Only within a segment (so within a partition): a file's path says its segment
  (``{partition}/{segment}/``), and segment meta (binlog lists from the add actions, row counts
  in the ChannelState) stays true after it.
- Only segments of vchannels this node runs, that are not dropped (neither the segment, its
  partition nor its collection): only the owner adds files to a segment or removes them.
- Concurrently with the flowgraphs: files added meanwhile are not touched; the commit lands
  only while none of the files it rewrites was removed since it read them (Delta's
  concurrent-delete conflict, ``delta_log.ReadFiles``), and only while the vchannel's ``txn``
  is still the one this node last committed (another node took the channel: refused). A
  refused compaction deletes the file it wrote; the small files stay and are tried again later.
- The rewritten files stay on disk for ``retention`` (readers of older versions may still open
  them), then they are deleted.

Pure planning is here (``plan_segment``), the executor's rewrite (``rewrite``) and the driver's
commit (``commit_rewrites``); ``pipeline.compactor`` schedules them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from ..faults import crash_point
from .binlog_writer import FileEntry, write_segment_file
from .delta_log import AddFile, DeltaLog, ReadFiles, RemoveFile
from .layout import StorageLayout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactionSettings:
    interval: float = 600.0          # seconds between rounds; 0: no compaction
    min_files: int = 16              # small files a segment needs before it is rewritten
    target_bytes: int = 64 << 20     # size of the rewritten files; larger files are left alone
    retention: float = 3 * 3600.0    # seconds rewritten files stay on disk
    orphan_retention: float = 86400.0  # seconds a file no commit added stays on disk (a crash between write and commit)


@dataclass(frozen=True)
class SegmentFile:
    path: str      # relative to the table root
    size: int
    rows: int


@dataclass(frozen=True)
class Rewrite:
    """Files of one segment to rewrite as one file. Made on the driver, run on an executor."""

    collection_id: int
    vchannel: str
    segment_id: int
    partition_id: int
    inputs: tuple[SegmentFile, ...]
    schema: pa.Schema                # the insert_log table's (``CollectionLayout.insert_schema``)
    storage: StorageLayout

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.inputs)


def segment_of(path: str) -> tuple[int, int] | None:
    """(partition, segment) of an insert binlog path ``{partition}/{segment}/part-*.parquet``."""
    parts = path.split("/")
    if len(parts) == 3 and parts[0].lstrip("-").isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


def plan_segment(files: list[SegmentFile], settings: CompactionSettings) -> list[tuple[SegmentFile, ...]]:
    """Groups of a segment's small files (below the target size) to rewrite, each group up to
    the target size and of two files or more; none unless ``min_files`` small files are there.
    Oldest names first is not meaningful (names are random), so files are taken by size,
    smallest first: the groups fill up evenly."""
    small = sorted((f for f in files if f.size < settings.target_bytes), key=lambda f: (f.size, f.path))
    if len(small) < max(2, settings.min_files):
        return []
    groups, group, size = [], [], 0
    for f in small:
        if group and size + f.size > settings.target_bytes:
            groups.append(tuple(group))
            group, size = [], 0
        group.append(f)
        size += f.size
    groups.append(tuple(group))
    return [g for g in groups if len(g) >= 2]


def rewrite(task: Rewrite) -> FileEntry:
    """Runs on an executor: read the inputs, write them as one file of the segment (rows by ``_ts``)."""
    schema = task.schema
    fs, base = task.storage.filesystem(task.storage.insert_log(task.collection_id))
    tables = [pq.read_table(f"{base}/{f.path}", filesystem=fs, schema=schema) for f in task.inputs]
    rows = pa.concat_tables(tables).sort_by("_ts")
    if len(rows) != task.rows:
        raise RuntimeError(f"segment {task.segment_id}: read {len(rows)} rows from {len(task.inputs)} files "
                           f"whose add actions say {task.rows}")
    return write_segment_file(task.storage, task.collection_id, schema, task.segment_id, task.partition_id, rows)


def commit_rewrites(insert_log: DeltaLog, read_version: int, done: list[tuple[Rewrite, FileEntry]],
                    expected: dict[str, int | None]) -> int:
    """Runs on the driver, under the collection committer's lock: one OPTIMIZE commit for the
    rewrites of one collection. Raises ``delta_log.FilesRemoved`` or ``TxnMoved`` when refused."""
    inputs = [f for task, _ in done for f in task.inputs]
    crash_point("before_compaction_commit")
    version = insert_log.commit(
        adds=[AddFile(entry.path, entry.size, entry.stats) for _, entry in done],
        removes=[RemoveFile(f.path, f.size) for f in inputs], txns={}, expected=expected,
        info={"deltanode.compaction": f"{len(done)} segment file group(s), {len(inputs)} files"},
        rewrites=ReadFiles(read_version, frozenset(f.path for f in inputs)))
    crash_point("after_compaction_commit")
    return version
