"""Making files on a filesystem survive a power cut: fsync of a file's data, and of the directory
its name was created in.

A killed process loses nothing the kernel already holds: its page cache outlives it. A power cut
(or a kernel crash) loses every write not fsynced, and POSIX keeps a file's name apart from its
data: the name of a new file (or directory) is durable only once the directory holding it is
fsynced. So a Delta commit names only files whose data and names are durable, and counts as done
only when its own name is (docs/durability.md). Object stores need none of this: a PUT that was
answered is durable.

Runs on the driver (commit files, checkpoints) and on executors (binlog files).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

# The directories this process created or made sure of, without and with their names made durable:
# each costs one fsync of its parent once per process, never per file written in it.
_known_dirs: dict[bool, set[str]] = {False: set(), True: set()}


def sync_file(path: str) -> None:
    """fsync the data of the file at ``path`` (written and closed by whatever wrote it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path: str) -> None:
    """fsync the directory at ``path``: the names created, linked or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_files(paths: Iterable[str]) -> None:
    """fsync each file, then each directory holding one of them, once."""
    parents: dict[str, None] = {}
    for path in paths:
        sync_file(path)
        parents[os.path.dirname(path)] = None
    for parent in parents:
        sync_dir(parent)


def make_dirs(path: str, *, sync: bool, again: bool = False) -> None:
    """Create the directory ``path`` and its missing parents. ``sync``: each one's name durable
    (its parent fsynced) before this returns, also for a directory that another process created:
    that process may have died before its own fsync, and a file committed in it would be lost
    with it. Once per directory and process; ``again``: the directory was removed since (it and
    its parents are forgotten, and made anew where missing)."""
    if again:
        forget = path
        while forget not in ("", os.path.dirname(forget)):
            _known_dirs[False].discard(forget)
            _known_dirs[True].discard(forget)
            forget = os.path.dirname(forget)
    if path in _known_dirs[True] or (not sync and path in _known_dirs[False]):
        return
    if not sync:
        os.makedirs(path, exist_ok=True)
        _known_dirs[False].add(path)
        return
    parent = os.path.dirname(path)
    if parent != path:
        make_dirs(parent, sync=True)
        try:
            os.mkdir(path)
            sync_dir(parent)
        except FileExistsError:
            try:
                sync_dir(parent)
            except PermissionError:   # above storage.root, a directory this user may not read: not ours
                pass
    _known_dirs[True].add(path)
