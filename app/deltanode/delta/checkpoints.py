"""Delta checkpoints of a table on a filesystem, published so that a power cut never leaves a
``_last_checkpoint`` or a checkpoint file that readers cannot read.

delta-rs's ``create_checkpoint`` writes ``{version}.checkpoint.parquet`` and ``_last_checkpoint``
straight into the log, neither fsynced, and every commit fsyncs the log directory, which can
make their names durable before their data. After a power cut, delta-rs, Polars and DuckDB
(delta-kernel) refuse a table whose ``_last_checkpoint`` names a missing, empty or torn checkpoint
(docs/durability.md): the whole table is unreadable. So delta-rs writes the checkpoint in a scratch
log beside the table (hard links to the versions it reads), and it is published in Delta's order
of durability: the checkpoint's data fsynced, its name linked into the log and the log fsynced,
then ``_last_checkpoint`` likewise. Four fsyncs every ``CHECKPOINT_INTERVAL`` commits.

Runs on the driver (``delta_log``'s checkpoint thread).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

from deltalake import DeltaTable

from . import durable

LOG_DIR = "_delta_log"
LAST = "_last_checkpoint"
# Under the table root: readers never list it (they read the log) and delta-rs's vacuum skips
# names starting with "_".
SCRATCH = "_checkpoint_scratch"
STALE_SECONDS = 3600   # a scratch log older than this was left by a process that died writing it


def _version_name(version: int) -> str:
    return f"{version:020d}.json"


def _parts(hint: dict) -> list[str]:
    """The checkpoint files a ``_last_checkpoint`` names."""
    version, parts = int(hint["version"]), hint.get("parts")
    if not parts:
        return [f"{version:020d}.checkpoint.parquet"]
    return [f"{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet" for i in range(1, int(parts) + 1)]


def _read_hint(log_dir: str) -> dict | None:
    try:
        with open(os.path.join(log_dir, LAST), "rb") as f:
            return json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None


def _scratch_log(log_dir: str, scratch_log: str, *, from_hint: bool) -> int:
    """Hard-link into ``scratch_log`` what delta-rs reads to checkpoint the newest version: the
    last checkpoint (``from_hint``, when ``_last_checkpoint`` names one that exists) and the
    versions after it, else every version; the number of versions linked."""
    hint = _read_hint(log_dir) if from_hint else None
    start = 0
    if hint is not None and all(os.path.exists(os.path.join(log_dir, p)) for p in _parts(hint)):
        for name in _parts(hint):
            os.link(os.path.join(log_dir, name), os.path.join(scratch_log, name))
        with open(os.path.join(scratch_log, LAST), "wb") as f:   # a copy: delta-rs replaces it
            f.write(json.dumps(hint).encode())
        start = int(hint["version"]) + 1
    version = start
    while True:
        try:
            os.link(os.path.join(log_dir, _version_name(version)), os.path.join(scratch_log, _version_name(version)))
        except FileNotFoundError:
            return version - start
        version += 1


def _clear_stale(root: str) -> None:
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            if os.stat(path).st_mtime < time.time() - STALE_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
        except FileNotFoundError:
            pass


def _checkpointed(log_dir: str, scratch: str, *, from_hint: bool) -> str | None:
    """A scratch log under ``scratch``, checkpointed by delta-rs; None when there is no version
    to checkpoint. A last checkpoint delta-rs cannot read (a torn one, left by a writer that does
    not publish checkpoints durably) is passed over: the checkpoint is then made from every version."""
    table = scratch if from_hint else os.path.join(scratch, "every-version")
    scratch_log = os.path.join(table, LOG_DIR)
    os.makedirs(scratch_log)
    if not _scratch_log(log_dir, scratch_log, from_hint=from_hint):
        return None
    try:
        DeltaTable(table).create_checkpoint()
    except Exception:
        if not from_hint:
            raise
        return _checkpointed(log_dir, scratch, from_hint=False)
    return scratch_log


def write_checkpoint(table_path: str) -> int | None:
    """Checkpoint the table at ``table_path`` (a local path) at its newest version, durably; the
    version, None when its last checkpoint is already the newest version."""
    log_dir = os.path.join(table_path, LOG_DIR)
    root = os.path.join(table_path, SCRATCH)
    os.makedirs(root, exist_ok=True)
    _clear_stale(root)
    scratch = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root)
    try:
        scratch_log = _checkpointed(log_dir, scratch, from_hint=True)
        if scratch_log is None:
            return None
        hint = _read_hint(scratch_log)
        if hint is None:
            raise RuntimeError(f"delta-rs wrote no {LAST} in {scratch_log}")
        for name in _parts(hint):
            durable.sync_file(os.path.join(scratch_log, name))
            try:
                os.link(os.path.join(scratch_log, name), os.path.join(log_dir, name))
            except FileExistsError:   # another process checkpointed the same version
                pass
        durable.sync_dir(log_dir)
        now = _read_hint(log_dir)
        if now is None or int(now["version"]) < int(hint["version"]):
            durable.sync_file(os.path.join(scratch_log, LAST))
            os.rename(os.path.join(scratch_log, LAST), os.path.join(log_dir, LAST))
            durable.sync_dir(log_dir)
        return int(hint["version"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
