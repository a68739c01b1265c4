"""What a file write costs on this machine, and how that depends on the data the filesystem holds.

``PYTHONPATH=app .venv/bin/python -m deltanode_bench.disk_probe [DIR] [--keep-mb N]`` writes
130 MB in 1 MB writes (the size of a parquet data page) into a scratch directory under DIR
three times: next to nothing, next to N MB of freshly written files (a DataNode's tables
during the benchmark), and after those are deleted; it prints the CPU and wall seconds of each.

Why it exists: on the machines this project is benchmarked on, writing 130 MB took 0.025 s of
CPU into an empty directory and 0.19-0.37 s next to 1.5 GB of kept files (tmpfs: 0.04 s both). The benchmark's sinks
write beside their growing Delta tables, so the plain-process reference is compared with the
DataNode on the same messages and beside the same tables, not on an empty work directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

MB = 1 << 20


def timed_write(path: str, megabytes: int, block: bytes) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of writing ``megabytes`` of ``block`` to ``path``."""
    c0, t0 = time.process_time(), time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(megabytes * MB // len(block)):
            f.write(block)
    return time.process_time() - c0, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deltanode_bench.disk_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", default=tempfile.gettempdir(), help="filesystem to probe (default: %(default)s)")
    p.add_argument("--keep-mb", type=int, default=1536, help="MB of files kept for the second write (default 1536)")
    p.add_argument("--write-mb", type=int, default=130, help="MB per timed write (default 130)")
    args = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="deltanode-disk-probe-", dir=args.dir)
    block = os.urandom(MB)
    try:
        rows = [("empty directory", timed_write(os.path.join(work, "a"), args.write_mb, block))]
        keep = os.path.join(work, "keep")
        os.mkdir(keep)
        for i in range(args.keep_mb // args.write_mb + 1):
            timed_write(os.path.join(keep, str(i)), min(args.write_mb, args.keep_mb - i * args.write_mb), block)
        rows.append((f"beside {args.keep_mb} MB just written", timed_write(os.path.join(work, "b"), args.write_mb,
                                                                           block)))
        shutil.rmtree(keep)
        rows.append(("after deleting those", timed_write(os.path.join(work, "c"), args.write_mb, block)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.write_mb} MB in 1 MB writes under {args.dir}:")
    for what, (cpu, wall) in rows:
        print(f"  {what:<32} cpu {cpu:6.3f} s  wall {wall:6.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
