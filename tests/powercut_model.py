"""What a power cut keeps of a filesystem: only what was made durable by fsync, as POSIX promises
it and Jepsen's LazyFS models it. The model of ``tests/integration/powercut_fs.py``'s FUSE
filesystem, usable without FUSE (``tests/unit/test_powercut_model.py``).

Every operation goes through to a backing directory at once, so reads see what a process would
see before the cut; the model keeps apart what a cut would undo:

- a file's data written or truncated since its last fsync: its content at that fsync is kept
  aside (none for a file created since, whose durable content is empty);
- a directory whose names changed (created, linked, renamed, removed) since its last fsync: its
  names at that fsync are kept aside (none for a directory created since);
- a file whose last name goes: a hard link keeps it, for a durable name that a cut brings back.

``cut()`` rebuilds the backing directory as the durable state: from the root down, each directory
holds its durable names (its current ones where unchanged since its fsync), each file its durable
content. A name whose directory was not fsynced since it appeared is gone (and a new directory
with it, whatever was fsynced inside); a file fsynced under a name that was not is gone too; a
removed or renamed name whose directory was not fsynced comes back. Unsynced data is dropped
whole (the harshest of the outcomes POSIX allows; no torn writes), unless the cut is told that
the kernel had written some of it back: ``names`` and ``data`` are the chances that each changed
directory, and each changed file's data, was written back whole before the cut, in no order (each
inode on its own, as a kernel flushes them; ext4 commits names to its journal every 5 s and
writes data back after 30 s): what a machine without fsync keeps, a random mix of old and new.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import threading
from dataclasses import dataclass

RENAME_NOREPLACE = 1


@dataclass(frozen=True, kw_only=True)
class CutReport:
    """What a cut undid."""

    names_dropped: int      # names that existed and are gone after the cut
    names_restored: int     # names that were removed or renamed and are back
    files_reverted: int     # files whose content went back to their last fsync (or to empty)
    paths_dropped: tuple[str, ...]   # the dropped names, at most 50, for a test's message


@dataclass(frozen=True)
class _Entry:
    ino: int
    is_dir: bool


class PowerCutModel:
    """A backing directory and what a power cut would undo of it. ``path`` arguments are absolute
    inside the filesystem (``/a/b``). Thread-safe (one lock around every change). Runs in the
    filesystem's process (``powercut_fs.py``), or in a unit test."""

    def __init__(self, backing: str, stash: str) -> None:
        """``stash``: an empty directory on the same filesystem as ``backing``, outside it."""
        self.backing, self.stash = os.path.abspath(backing), os.path.abspath(stash)
        os.makedirs(self.stash, exist_ok=True)
        self._lock = threading.RLock()
        self._saved: dict[int, str | None] = {}            # ino -> copy of its durable content (None: empty)
        self._dirs: dict[int, dict[str, _Entry]] = {}      # dir ino -> its durable names
        self._kept: set[int] = set()                       # inos with a hard link in the stash

    # --- paths -------------------------------------------------------------------------------

    def real(self, path: str) -> str:
        return self.backing + path if path != "/" else self.backing

    def _ino(self, path: str) -> int:
        return os.lstat(self.real(path)).st_ino

    @staticmethod
    def _parent(path: str) -> str:
        return os.path.dirname(path) or "/"

    # --- bookkeeping before a change -----------------------------------------------------------

    def _names_change(self, dir_path: str) -> None:
        """Keep the directory's names as they are, unless kept since its last fsync."""
        ino = self._ino(dir_path)
        if ino not in self._dirs:
            self._dirs[ino] = self._listing(self.real(dir_path))

    @staticmethod
    def _listing(real_dir: str) -> dict[str, _Entry]:
        out = {}
        with os.scandir(real_dir) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                out[e.name] = _Entry(st.st_ino, stat.S_ISDIR(st.st_mode))
        return out

    def _data_change(self, real_path: str) -> None:
        """Keep the file's content as it is, unless kept since its last fsync."""
        st = os.lstat(real_path)
        if st.st_ino in self._saved or not stat.S_ISREG(st.st_mode):
            return
        copy = os.path.join(self.stash, f"data-{st.st_ino}")
        shutil.copyfile(real_path, copy)
        self._saved[st.st_ino] = copy

    def _name_goes(self, path: str) -> None:
        """A name is about to be removed or replaced: keep its file alive for a cut to bring back."""
        try:
            st = os.lstat(self.real(path))
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            self._dirs.setdefault(st.st_ino, {})   # rmdir: it is empty, and was so at its last fsync if not kept
            return
        if st.st_ino not in self._kept:
            os.link(self.real(path), os.path.join(self.stash, f"ino-{st.st_ino}"), follow_symlinks=False)
            self._kept.add(st.st_ino)

    # --- operations ----------------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        with self._lock:
            real = self.real(path)
            exists = os.path.lexists(real)
            if flags & os.O_CREAT and not exists:
                self._names_change(self._parent(path))
                fd = os.open(real, flags, mode)
                self._saved[os.fstat(fd).st_ino] = None
                return fd
            if flags & os.O_TRUNC and exists:
                self._data_change(real)
            return os.open(real, flags, mode)

    def write(self, fd: int, data: bytes, offset: int) -> int:
        with self._lock:
            ino = os.fstat(fd).st_ino
            if ino not in self._saved:
                self._save_fd(fd, ino)
            return os.pwrite(fd, data, offset)

    def _save_fd(self, fd: int, ino: int) -> None:
        copy = os.path.join(self.stash, f"data-{ino}")
        shutil.copyfile(f"/proc/self/fd/{fd}", copy)   # the file, reopened for reading (fd may be write-only)
        self._saved[ino] = copy

    def truncate(self, path: str, length: int, fd: int | None = None) -> None:
        with self._lock:
            if fd is not None:
                ino = os.fstat(fd).st_ino
                if ino not in self._saved:
                    self._save_fd(fd, ino)
                os.ftruncate(fd, length)
            else:
                self._data_change(self.real(path))
                os.truncate(self.real(path), length)

    def fsync(self, fd: int) -> None:
        """The file's content as it is now survives a cut (its name does not, by this)."""
        with self._lock:
            os.fsync(fd)
            copy = self._saved.pop(os.fstat(fd).st_ino, None)
            if copy is not None:
                os.unlink(copy)

    def fsyncdir(self, path: str) -> None:
        """The directory's names as they are now survive a cut (not its own name in its parent)."""
        with self._lock:
            self._dirs.pop(self._ino(path), None)

    def close(self, fd: int) -> None:
        os.close(fd)

    def sync_all(self) -> None:
        """Everything as it is now survives a cut: sync(2), or the kernel's writeback catching up."""
        with self._lock:
            for copy in self._saved.values():
                if copy is not None:
                    os.unlink(copy)
            self._saved, self._dirs = {}, {}

    def mkdir(self, path: str, mode: int = 0o755) -> None:
        with self._lock:
            self._names_change(self._parent(path))
            os.mkdir(self.real(path), mode)
            self._dirs[self._ino(path)] = {}

    def rmdir(self, path: str) -> None:
        with self._lock:
            self._names_change(self._parent(path))
            self._name_goes(path)
            os.rmdir(self.real(path))

    def unlink(self, path: str) -> None:
        with self._lock:
            self._names_change(self._parent(path))
            self._name_goes(path)
            os.unlink(self.real(path))

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        with self._lock:
            if flags & ~RENAME_NOREPLACE:
                raise OSError(22, "only RENAME_NOREPLACE is modelled")   # EINVAL
            if flags & RENAME_NOREPLACE and os.path.lexists(self.real(new)):
                raise FileExistsError(17, "exists", new)
            self._names_change(self._parent(old))
            self._names_change(self._parent(new))
            self._name_goes(new)
            os.rename(self.real(old), self.real(new))

    def link(self, new: str, existing: str) -> None:
        with self._lock:
            self._names_change(self._parent(new))
            os.link(self.real(existing), self.real(new), follow_symlinks=False)

    def symlink(self, new: str, target: str) -> None:
        with self._lock:
            self._names_change(self._parent(new))
            os.symlink(target, self.real(new))

    # --- the cut ------------------------------------------------------------------------------

    def cut(self, *, names: float = 0.0, data: float = 0.0, seed: int = 0) -> CutReport:
        """Undo every change not made durable, in the backing directory, but those the kernel
        wrote back: each changed directory's names with the chance ``names``, each changed
        file's data with the chance ``data``. The model starts over (everything there is then
        durable)."""
        with self._lock:
            chance = random.Random(seed)
            for ino in sorted(self._saved):
                if chance.random() < data:
                    copy = self._saved.pop(ino)
                    if copy is not None:
                        os.unlink(copy)
            for ino in sorted(self._dirs):
                if chance.random() < names:
                    del self._dirs[ino]
            where = self._index()
            rebuilt = self.backing + ".rebuilt"
            os.mkdir(rebuilt)
            placed: dict[int, str] = {}
            self._rebuild(rebuilt, os.lstat(self.backing).st_ino, where, placed)
            reverted = 0
            for ino, copy in self._saved.items():
                if ino not in placed:
                    continue
                reverted += 1
                with open(placed[ino], "r+b") as f:
                    if copy is None:
                        f.truncate(0)
                    else:
                        with open(copy, "rb") as src:
                            data = src.read()
                        f.write(data)
                        f.truncate(len(data))
            before = self._names(self.backing)
            after = self._names(rebuilt)
            old = self.backing + ".before-cut"
            os.rename(self.backing, old)
            os.rename(rebuilt, self.backing)
            shutil.rmtree(old)
            shutil.rmtree(self.stash)
            os.makedirs(self.stash)
            self._saved, self._dirs, self._kept = {}, {}, set()
            dropped = sorted(before - after)
            return CutReport(names_dropped=len(dropped), names_restored=len(after - before),
                             files_reverted=reverted, paths_dropped=tuple(dropped[:50]))

    def _index(self) -> dict[int, str]:
        """Where each inode is now: ino -> a path (the tree first, then the stash's links)."""
        where: dict[int, str] = {}
        for top, dirs, files in os.walk(self.backing):
            for name in dirs + files:
                path = os.path.join(top, name)
                where.setdefault(os.lstat(path).st_ino, path)
        for name in os.listdir(self.stash):
            if name.startswith("ino-"):
                where.setdefault(int(name[4:]), os.path.join(self.stash, name))
        return where

    def _rebuild(self, dst: str, dir_ino: int, where: dict[int, str], placed: dict[int, str]) -> None:
        """Make ``dst`` hold the durable names of the directory ``dir_ino``, recursively;
        ``placed``: each file's inode -> a path of it in ``dst``."""
        names = self._dirs.get(dir_ino)
        if names is None:   # unchanged since its last fsync: its names now are its durable ones
            src = self.backing if dir_ino == os.lstat(self.backing).st_ino else where[dir_ino]
            names = self._listing(src)
        for name, entry in names.items():
            path = os.path.join(dst, name)
            if entry.is_dir:
                os.mkdir(path)
                self._rebuild(path, entry.ino, where, placed)
            else:
                os.link(where[entry.ino], path, follow_symlinks=False)
                placed.setdefault(entry.ino, path)

    @staticmethod
    def _names(root: str) -> set[str]:
        out = set()
        for top, dirs, files in os.walk(root):
            for name in dirs + files:
                out.add(os.path.relpath(os.path.join(top, name), root))
        return out
