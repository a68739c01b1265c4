"""What compaction does to the scale benchmark's tables: files, and the time to read a collection.

``python -m deltanode_bench.compaction STORAGE_ROOT`` (or after the largest point of
``build/bench.sh --scale``): counts the insert binlog files of every collection's insert_log
table, reads a sample of collections whole (``storage.tables.read_table``: delta-rs's file list,
read through pyarrow's filesystem, as a downstream reader would), then compacts every table with
DeltaNode's own rewrite and commit (``storage.compaction``: the same planning from the live
files and their deletion vectors, rewrite and OPTIMIZE commit the DataNode's compactor runs,
here in one process once the DataNode has stopped), and counts and reads again.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from deltanode.config.sections.pipeline import CompactionSettings
from deltanode.delta.actions import AddFile
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout, segment_of
from deltanode.delta.tables import read_table
from deltanode.executor.binlog_writer import INSERT_STATS
from deltanode.executor.rewrite_task import rewrite
from deltanode.records import Rewrite
from deltanode.state.compaction_plan import commit_rewrites, plan_segment, segment_files

from . import latency as lat
from .report import secs, table


@dataclass
class CompactionFigures:
    tables: int
    files_before: int
    files_after: int
    rows_before: int
    rows_after: int
    rewrites: int
    compaction_cpu_s: float
    sample: int
    read_before: list[float]     # seconds to read one collection, per sampled collection
    read_after: list[float]


def _files_and_rows(uri: str) -> tuple[int, int]:
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    return actions.num_rows, sum(actions.column("num_records").to_pylist())


def _read_seconds(storage: StorageLayout, uris: list[str]) -> list[float]:
    out = []
    for uri in uris:
        started = time.perf_counter()
        read_table(storage, uri)
        out.append(time.perf_counter() - started)
    return out


def _primary_key(add: AddFile) -> str:
    """The key column of an insert binlog: the one its stats cover besides ``INSERT_STATS``."""
    return next(c for c in json.loads(add.stats)["minValues"] if c not in INSERT_STATS)


def _compact(storage: StorageLayout, collection_id: int, settings: CompactionSettings) -> int:
    """Every segment of one collection, as one round of the DataNode's compactor would (no
    DataNode runs meanwhile, so no vchannel txn is expected)."""
    uri = storage.insert_log(collection_id)
    insert_log = DeltaLog.open(uri)
    binlogs = [add for add in insert_log.live_files().values() if segment_of(add.path) is not None]
    if not binlogs:
        return 0
    schema = pq.read_schema(os.path.join(uri, binlogs[0].path)).remove_metadata()
    pk = _primary_key(binlogs[0])
    done = []
    for (partition, segment), files in sorted(segment_files(binlogs).items()):
        for group in plan_segment(files, settings):
            task = Rewrite(collection_id, "", segment, partition, group, schema, pk, storage)
            done.append((task, rewrite(task)))
    if done:
        commit_rewrites(insert_log, done, expected={})
    return len(done)


def measure(root: str, sample: int = 20, settings: CompactionSettings = CompactionSettings()) -> CompactionFigures:
    storage = StorageLayout(root)
    ids = sorted(int(name) for name in os.listdir(os.path.join(root, "insert_log")) if name.isdigit())
    uris = [storage.insert_log(cid) for cid in ids]
    step = max(1, len(ids) // sample)
    sampled = uris[::step][:sample]
    before = [_files_and_rows(uri) for uri in uris]
    read_before = _read_seconds(storage, sampled)
    cpu = time.process_time()
    rewrites = sum(_compact(storage, cid, settings) for cid in ids)
    cpu = time.process_time() - cpu
    after = [_files_and_rows(uri) for uri in uris]
    read_after = _read_seconds(storage, sampled)
    return CompactionFigures(len(ids), sum(f for f, _ in before), sum(f for f, _ in after), sum(r for _, r in before),
                             sum(r for _, r in after), rewrites, cpu, len(sampled), read_before, read_after)


def render(f: CompactionFigures, settings: CompactionSettings = CompactionSettings()) -> str:
    rows = [["before", f.files_before, f"{f.files_before / max(1, f.tables):.1f}", f.rows_before,
             secs(lat.percentile(f.read_before, 50), 3), secs(max(f.read_before), 3)],
            ["after", f.files_after, f"{f.files_after / max(1, f.tables):.1f}", f.rows_after,
             secs(lat.percentile(f.read_after, 50), 3), secs(max(f.read_after), 3)]]
    return "\n".join([
        f"Compaction of the tables ({f.tables} collections; min.files {settings.min_files}, target "
        f"{settings.target_bytes >> 20} MiB): {f.rewrites} segment rewrites, {f.compaction_cpu_s:.1f} s of CPU in one "
        f"process; read = the whole table (read_table) of {f.sample} collections",
        table(["", "binlog files", "per collection", "rows", "read p50 s", "read max s"], rows)])


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.compaction", description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="storage.root of a DataNode that has stopped (its insert_log tables are compacted)")
    p.add_argument("--sample", type=int, default=20, help="collections read before and after (default 20)")
    args = p.parse_args()
    print(render(measure(args.root, args.sample)))


if __name__ == "__main__":
    main()
