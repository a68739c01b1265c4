"""What ``storage.fsync`` costs on this disk: Delta commits a second and binlog files a second,
with and without fsync, in one process (no Spark, no broker).

``PYTHONPATH=app:build .venv/bin/python -m deltanode_bench.fsync_cost [DIR] [--commits N] [--files N]``

- commits: ``DeltaLog.commit`` of one add action and one ``txn`` (a live vchannel's cycle), on a
  fresh table under DIR: with fsync, the commit file's data and its directory fsynced;
- binlog files: a ``BinlogWriter`` per task writing one 50-row insert binlog into each of two
  segments and closing them: with fsync, each file's data and each directory holding one;
- cycles: both, as one vchannel's cycle makes them (its task's files, then their commit).

Each row is measured with fsync off, then on, on the same directory, ``--repeat`` times in turn
(a shared machine's load comes and goes); the table prints the median rates, the wall time each
item costs more with fsync, and the CPU per item. The end-to-end cost at scale:
``build/bench.sh --scale 1,256 --scale-conf '' --scale-conf 'storage.fsync=false'``
(docs/durability.md).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import pyarrow as pa

from deltanode.delta import delta_log
from deltanode.delta.actions import AddFile
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import StoreOptions
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.records import FileEntry
from deltanode.wire.schema import CollectionLayout, schema_from_json

from .report import table

LAYOUT = CollectionLayout.from_proto(schema_from_json(
    {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                {"name": "vec", "data_type": "FloatVector", "dim": 8}]}, "fsync_cost"))
ROWS = 50


def _insert_columns(first: int) -> list[pa.Array]:
    """A 50-row insert's columns: the schema's but its segment and partition."""
    pks = pa.array(range(first, first + ROWS), pa.int64())
    vecs = pa.array([[0.5] * 8] * ROWS, pa.list_(pa.float32()))
    return [pks, vecs, pa.array(range(100, 100 + ROWS), pa.int64()), pks]


def _write_task(storage: StorageLayout, task: int) -> list[FileEntry]:
    writer = BinlogWriter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema())
    for segment in (1, 2):
        writer.add_insert(segment, 1, _insert_columns(task * 1000 + segment * ROWS), ROWS, ROWS * 48, task, 100, 149)
    return writer.close()


def _add(entry: FileEntry) -> AddFile:
    return AddFile(path=entry.path, size=entry.size, stats=entry.stats)


def _timed(n: int, step: Callable[[int], None]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``step(0) ... step(n - 1)``."""
    c0, t0 = time.process_time(), time.perf_counter()
    for i in range(n):
        step(i)
    return time.perf_counter() - t0, time.process_time() - c0


def measure(root: str, fsync: bool, commits: int, files: int) -> dict[str, tuple[int, float, float]]:
    """(items, wall s, CPU s) of each measurement, under a fresh directory of ``root``."""
    work = tempfile.mkdtemp(prefix=f"fsync-{'on' if fsync else 'off'}-", dir=root)
    try:
        storage = StorageLayout(work, StoreOptions(fsync=fsync))
        out = {}
        log = DeltaLog(storage.insert_log(1), LAYOUT.insert_schema(), storage.options)
        entry = _write_task(storage, 0)[0]
        wall, cpu = _timed(commits, lambda i: log.commit(adds=[_add(entry)], txns={"v": i + 1}, expected={},
                                                         info={}))
        out["commits"] = (commits, wall, cpu)
        tasks = files // 2
        wall, cpu = _timed(tasks, lambda i: _write_task(storage, i + 1))
        out["binlog files (50 rows)"] = (2 * tasks, wall, cpu)
        cycle_log = DeltaLog(storage.insert_log(2), LAYOUT.insert_schema(), storage.options)

        def cycle(i: int) -> None:
            entries = _write_task(storage, 10_000 + i)
            cycle_log.commit(adds=[_add(e) for e in entries], txns={"v": i + 1}, expected={}, info={})
        wall, cpu = _timed(commits // 2, cycle)
        out["cycles (2 files + a commit)"] = (commits // 2, wall, cpu)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.fsync_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", default=tempfile.gettempdir(), help="filesystem to measure (default: %(default)s)")
    p.add_argument("--commits", type=int, default=1000, help="commits per measurement (default 1000)")
    p.add_argument("--files", type=int, default=1000, help="binlog files per measurement (default 1000)")
    p.add_argument("--repeat", type=int, default=3, help="measurements of each, off and on in turn (default 3)")
    args = p.parse_args(argv)
    # Checkpoints are written off the commit path (a background thread, four fsyncs each 100
    # commits): left out, so that no checkpoint runs on while a measurement's directory is removed.
    delta_log.CHECKPOINT_INTERVAL = 1 << 62
    runs: dict[bool, list[dict[str, tuple[int, float, float]]]] = {False: [], True: []}
    for _ in range(args.repeat):
        for fsync in (False, True):
            runs[fsync].append(measure(args.dir, fsync, args.commits, args.files))

    def median(fsync: bool, what: str, at: int) -> float:
        return statistics.median(run[what][at] for run in runs[fsync])
    rows = []
    for what in runs[False][0]:
        n = runs[False][0][what][0]
        wall_off, wall_on = median(False, what, 1), median(True, what, 1)
        rows.append([what, n, f"{n / wall_off:,.0f}", f"{n / wall_on:,.0f}", f"{1e3 * (wall_on - wall_off) / n:.2f}",
                     f"{1e3 * median(False, what, 2) / n:.2f}", f"{1e3 * median(True, what, 2) / n:.2f}"])
    print(f"storage.fsync under {args.dir}: rates a second and milliseconds per item, medians of {args.repeat}")
    print(table(["what", "items", "/s fsync off", "/s fsync on", "ms more (wall)", "CPU ms off", "CPU ms on"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
