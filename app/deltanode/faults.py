"""Named crash points for the SIGKILL recovery tests (failpoints, as in etcd's gofail).

Inert unless ``DELTANODE_CRASH_AT=point[:n]`` is set in the environment of the DataNode:
then the n-th time (default 1) ``point`` is reached, the whole DataNode (driver, JVM and
Python workers) is killed with SIGKILL, the way a machine loss would stop it. Hits are
counted in files under ``DELTANODE_CRASH_DIR`` because they happen in several processes.
"""

from __future__ import annotations

import os
import signal

from .logs import flush_logs

CRASH_AT = "DELTANODE_CRASH_AT"
CRASH_DIR = "DELTANODE_CRASH_DIR"
CRASH_PGID = "DELTANODE_CRASH_PGID"   # the DataNode driver's process group, set at start

POINTS = ("before_binlog_write", "after_binlog_write", "after_side_commits", "after_commit")
COMPACTION_POINTS = ("before_compaction_commit", "after_compaction_commit")   # the compactor's, on the driver


def arm(pgid: int) -> None:
    """Record the driver's process group so a crash in a worker can take the driver down too."""
    if os.environ.get(CRASH_AT):
        os.environ[CRASH_PGID] = str(pgid)


def crash_point(name: str) -> None:
    spec = os.environ.get(CRASH_AT)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    counter = os.path.join(os.environ.get(CRASH_DIR, "/tmp"), f"deltanode-crash-{name}")
    with open(counter, "ab") as f:
        f.write(b".")
        hits = f.tell()
    if hits != int(nth or 1):
        return
    flush_logs()   # the driver's lines up to here (a worker has no writer: nothing to do)
    pgid = os.environ.get(CRASH_PGID)
    if pgid:
        os.killpg(int(pgid), signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # pyspark's worker daemon runs in a group of its own
