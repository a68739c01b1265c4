"""Named fault points for the recovery tests (failpoints, as in etcd's gofail): a crash or a pause.

Inert unless set in the environment of the DataNode (each point's hits are counted in files under
``DELTANODE_CRASH_DIR``, default /tmp, because they happen in several processes):

- ``DELTANODE_CRASH_AT=point[:n]``: the n-th time (default 1) ``point`` is reached, the whole
  DataNode (driver, JVM and Python workers) is killed with SIGKILL, the way a machine loss would
  stop it.
- ``DELTANODE_PAUSE_AT=point[:n]``: the n-th time ``point`` is reached, the process that reached
  it writes the marker file ``deltanode-paused-{point}`` (its pid, as text) under
  ``DELTANODE_CRASH_DIR`` and stops itself with SIGSTOP, every thread of it: its etcd lease stops
  being kept alive, the way a long GC pause or a frozen VM stops a node. It goes on from that very
  line when the test sends it SIGCONT. The marker is written before the stop, whole (renamed into
  place), so that a test that sees it knows the process is stopped or about to be.

Both may be set at once, on different points.
"""

from __future__ import annotations

import os
import signal

from ..logs import flush_logs

CRASH_AT = "DELTANODE_CRASH_AT"
PAUSE_AT = "DELTANODE_PAUSE_AT"
CRASH_DIR = "DELTANODE_CRASH_DIR"
CRASH_PGID = "DELTANODE_CRASH_PGID"   # the DataNode driver's process group, set at start
PAUSED_MARKER = "deltanode-paused-{point}"

POINTS = ("before_binlog_write", "after_binlog_write", "after_side_commits", "after_commit")
COMPACTION_POINTS = ("before_compaction_commit", "after_compaction_commit")   # the compactor's, on the driver
IMPORT_POINTS = ("after_import_deletes_commit", "after_import_commit")   # a Milvus import's, on the driver


def arm(pgid: int) -> None:
    """Record the driver's process group so a crash in a worker can take the driver down too."""
    if os.environ.get(CRASH_AT):
        os.environ[CRASH_PGID] = str(pgid)


def _fault_dir() -> str:
    return os.environ.get(CRASH_DIR, "/tmp")


def _nth_hit(variable: str, name: str, counter: str) -> bool:
    """True when ``variable`` names the point ``name`` and this hit is the n-th it asks for (the
    hits counted in the file ``counter``)."""
    spec = os.environ.get(variable)
    if not spec:
        return False
    point, _, nth = spec.partition(":")
    if point != name:
        return False
    with open(os.path.join(_fault_dir(), counter), "ab") as f:
        f.write(b".")
        hits = f.tell()
    return hits == int(nth or 1)


def paused_marker(point: str, directory: str) -> str:
    """The path of the marker a pause at ``point`` writes under ``directory``."""
    return os.path.join(directory, PAUSED_MARKER.format(point=point))


def _pause(name: str) -> None:
    marker = paused_marker(name, _fault_dir())
    with open(f"{marker}.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(f"{marker}.tmp", marker)
    flush_logs()   # the driver's lines up to here, readable while it is stopped
    os.kill(os.getpid(), signal.SIGSTOP)


def crash_point(name: str) -> None:
    if _nth_hit(PAUSE_AT, name, f"deltanode-pause-{name}"):
        _pause(name)
    if not _nth_hit(CRASH_AT, name, f"deltanode-crash-{name}"):
        return
    flush_logs()   # the driver's lines up to here (a worker has no writer: nothing to do)
    pgid = os.environ.get(CRASH_PGID)
    if pgid:
        os.killpg(int(pgid), signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # pyspark's worker daemon runs in a group of its own
