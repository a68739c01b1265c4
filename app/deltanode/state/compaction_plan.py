"""Compaction of a segment's binlog files: small files rewritten as few of a target size, and
files with many deleted rows rewritten without them.

DeltaNode commits every cycle for latency, so a vchannel that receives a few rows a second
adds a small binlog file to its segment every cycle (at 1,000 vchannels, ~45,000 files in two
minutes); readers open every one. Deletes mark rows with deletion vectors (DVs, inline in the
log), which only grow. Compaction rewrites files with a Delta commit that only rearranges data
(``OPTIMIZE``: ``remove`` and ``add`` with ``dataChange = false``, no ``txn``). Rules:

- Only within a segment (so within a partition): a file's path says its segment
  (``{partition}/{segment}/``), and segment meta (binlog lists from the add actions, row counts
  in the ChannelState) stays true after it.
- Only segments of vchannels this node runs, that are not dropped (neither the segment, its
  partition nor its collection): only the owner adds files to a segment or removes them.
- What is rewritten (``plan_segment``): a segment's small files (below ``target_bytes``) once
  it has ``min_files`` of them, in groups up to the target size of two files or more; and every
  file whose DV deletes ``deleted_ratio`` of its rows or more (Milvus's single compaction,
  ``dataCoord.compaction.single.ratio.threshold``): alone when it is not small, else with the
  segment's small files, however few. Deleted rows then leave the storage, and DVs stay small:
  a DV is what every further delete of its file writes again in the log.
- The rewrite drops the rows each input's DV, as planned, deletes, and keeps the others in
  input order, inputs by their least ``_ts`` (stats), so the output is roughly time-ordered. No
  sort: row ``p`` of input ``i`` is then output row ``sum(rows_j - planned_j for j < i) + p -
  (planned positions of i below p)``. A group whose rows are all deleted writes no file: its
  commit only removes the inputs.
- Concurrently with the flowgraphs, which keep deleting rows (a DV update removes a file and
  adds it back with a bigger DV): the commit, under the collection committer's lock, needs every
  input still live (else it is refused: a drop, another compaction); the positions an input's
  DV gained since planning are mapped to the output's rows as above and committed as its inline
  DV; each input's ``remove`` carries its current DV. Refused as well when the vchannel's
  ``txn`` is no longer the one this node last committed (another node took the channel), or when
  another process's version touched an input between that check and the commit
  (``delta_log.ReadFiles`` from the checked version). A refused compaction deletes what it
  wrote; the files stay and are tried again later.
- The rewritten files (with their bloom filters) stay on disk for ``retention`` (readers of
  older versions may still open them), then they are deleted.

Pure planning is here (``plan_segment``), the executor's rewrite (``rewrite``), the driver's
commit (``commit_rewrites``) and the bloom filters a sweep deletes (``orphaned_filters``);
``pipeline.compaction_rounds`` schedules them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping

import numpy as np
from pyarrow import fs as pafs

from ..config.sections.pipeline import CompactionSettings
from ..delta.actions import AddFile
from ..delta.deletion_vectors import inline, positions
from ..delta.delta_log import DeltaLog, FilesRemoved, ReadFiles
from ..delta.layout import PK_BLOOM_DIR, pk_bloom_path, segment_of
from ..delta.table_schema import TableSchema
from ..failure.crash_points import crash_point
from ..records import FileEntry, Rewrite, SegmentFile

log = logging.getLogger(__name__)


def segment_file(add: AddFile) -> SegmentFile:
    """A live insert binlog as compaction plans it, from its add action."""
    stats = json.loads(add.stats) if add.stats else {}
    return SegmentFile(add.path, add.size, int(stats.get("numRecords", 0)),
                       int(stats.get("minValues", {}).get("_ts", 0)), add.deletion_vector)


def segment_files(adds: Iterable[AddFile], segments: Collection[int] | None = None
                  ) -> dict[tuple[int, int], list[SegmentFile]]:
    """The insert binlogs among ``adds`` (a table's live files), by (partition, segment); only
    those of ``segments`` when given."""
    out: dict[tuple[int, int], list[SegmentFile]] = {}
    for add in adds:
        where = segment_of(add.path)
        if where is not None and (segments is None or where[1] in segments):
            out.setdefault(where, []).append(segment_file(add))
    return out


def plan_segment(files: list[SegmentFile], settings: CompactionSettings) -> list[tuple[SegmentFile, ...]]:
    """Groups of a segment's files to rewrite (see the module's rules), each in output order.

    Small files are grouped up to the target size, smallest first (names are random, so oldest
    first is not meaningful): the groups fill up evenly. A group keeps two files or more, or one
    that is mostly deleted."""
    small = sorted((f for f in files if f.size < settings.target_bytes), key=lambda f: (f.size, f.path))
    groups: list[tuple[SegmentFile, ...]] = [(f,) for f in sorted(files, key=lambda f: f.path)
                                             if f.size >= settings.target_bytes and _mostly_deleted(f, settings)]
    if len(small) >= max(2, settings.min_files) or any(_mostly_deleted(f, settings) for f in small):
        groups += [g for g in _fill(small, settings.target_bytes) if len(g) >= 2 or _mostly_deleted(g[0], settings)]
    return [tuple(sorted(g, key=lambda f: (f.min_ts, f.path))) for g in groups]


def _mostly_deleted(f: SegmentFile, settings: CompactionSettings) -> bool:
    return f.deleted > 0 and f.deleted >= settings.deleted_ratio * f.rows


def _fill(files: list[SegmentFile], target_bytes: int) -> list[tuple[SegmentFile, ...]]:
    """``files`` in order, cut into groups of at most ``target_bytes`` (a larger file: alone)."""
    groups: list[tuple[SegmentFile, ...]] = []
    group: list[SegmentFile] = []
    size = 0
    for f in files:
        if group and size + f.size > target_bytes:
            groups.append(tuple(group))
            group, size = [], 0
        group.append(f)
        size += f.size
    if group:
        groups.append(tuple(group))
    return groups


def commit_rewrites(insert_log: DeltaLog, done: list[tuple[Rewrite, FileEntry | None]],
                    expected: dict[str, int | None], schema: TableSchema | None = None) -> int:
    """Runs on the driver, under the collection committer's lock, ``insert_log`` brought up to
    date (``CollectionCommitter.insert_log``): one OPTIMIZE commit for the rewrites of one
    collection (``None``: a rewrite that wrote no file); ``schema``: the columns the outputs have
    (the rewrites' schema), by which the table is widened if it lacks some. Raises ``delta_log.FilesRemoved`` (an
    input is no longer live, or another process's version touched one) or ``TxnMoved`` when
    refused: nothing is committed."""
    live = insert_log.live_files()
    inputs = [f for task, _ in done for f in task.inputs]
    gone = sorted(f.path for f in inputs if f.path not in live)
    if gone:
        raise FilesRemoved(gone)
    adds = [_output(task, entry, live) for task, entry in done if entry is not None]
    crash_point("before_compaction_commit")
    version = insert_log.commit(
        adds=adds, removes=[live[f.path].removal() for f in inputs], txns={}, expected=expected,
        info={"deltanode.compaction": f"{len(done)} segment file group(s), {len(inputs)} files"},
        rewrites=ReadFiles(insert_log.version, frozenset(f.path for f in inputs)), schema=schema)
    crash_point("after_compaction_commit")
    return version


def _output(task: Rewrite, entry: FileEntry, live: Mapping[str, AddFile]) -> AddFile:
    """The output's add: with an inline DV of the rows deleted since planning, if any (its
    bounds are then no longer tight, as Delta's writers mark them)."""
    deleted = _deleted_since_planning(task, live)
    add = AddFile(path=entry.path, size=entry.size, stats=entry.stats, pk_bloom=entry.pk_bloom)
    return add.with_deletion_vector(inline(deleted)) if deleted.size else add


def _deleted_since_planning(task: Rewrite, live: Mapping[str, AddFile]) -> np.ndarray:
    """The output rows of ``task`` that its inputs' current DVs (``live``) delete and their
    planned ones did not (sorted int64): row ``p`` of an input is output row ``start + p -
    (planned positions below p)``, ``start`` the rows the earlier inputs kept."""
    fs, base = task.storage.filesystem(task.storage.insert_log(task.collection_id))
    out, start = [], 0
    for f in task.inputs:
        now = live[f.path].deletion_vector
        if now != f.deletion_vector:
            assert now is not None   # DVs only grow: a file that had one when planned still has one
            planned = positions(f.deletion_vector, base, fs) if f.deletion_vector is not None \
                else np.empty(0, np.uint64)
            current = positions(now, base, fs)
            added = np.setdiff1d(current, planned, assume_unique=True)
            if added.size != current.size - planned.size:
                raise RuntimeError(f"{f.path}: its DV lost rows deleted when the rewrite was planned "
                                   f"(DVs only grow)")
            out.append(start + added.astype(np.int64) - np.searchsorted(planned, added))
        start += f.rows - f.deleted
    return np.concatenate(out) if out else np.empty(0, np.int64)


def orphaned_filters(fs: pafs.FileSystem, base: str, live: set[str], older_than: float) -> list[str]:
    """Bloom filters of the table at ``base`` (paths relative to it) modified before
    ``older_than`` (epoch seconds) whose binlog is neither in ``live`` nor on disk: a crash
    between deleting a binlog and its filter. delta-rs's vacuum never lists them (it skips
    directories whose name starts with ``_``). One listing of the filters, then one lookup per
    old filter of a binlog that is not live."""
    selector = pafs.FileSelector(f"{base}/{PK_BLOOM_DIR}", recursive=True, allow_not_found=True)
    candidates: dict[str, str] = {}    # binlog -> its filter
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or info.mtime.timestamp() >= older_than:
            continue
        rel = info.path[len(base) + 1:]
        binlog = _binlog_of(rel)
        if binlog is not None and binlog not in live:
            candidates[binlog] = rel
    found = fs.get_file_info([f"{base}/{binlog}" for binlog in candidates])
    return [rel for rel, info in zip(candidates.values(), found) if info.type == pafs.FileType.NotFound]


def _binlog_of(filter_path: str) -> str | None:
    """The binlog whose filter is at ``filter_path`` (relative to the table root); None for
    another file there."""
    binlog = filter_path.removeprefix(f"{PK_BLOOM_DIR}/").removesuffix(".bloom")
    return binlog if pk_bloom_path(binlog) == filter_path else None
