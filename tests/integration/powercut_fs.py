"""A FUSE filesystem that, at a power cut, loses every write not made durable by fsync, in the
spirit of Jepsen's LazyFS: the model is ``tests/powercut_model.py``, this is its mount.

    python powercut_fs.py BACKING MOUNTPOINT

serves BACKING at MOUNTPOINT (in the foreground, one request at a time) until it is unmounted,
then reads one line on its standard input: ``cut NAMES DATA SEED`` rebuilds BACKING as a power cut
would leave it (``PowerCutModel.cut``) and prints what the cut undid as one JSON line; anything
else keeps BACKING as it is (a clean shutdown). A SIGKILL keeps the page cache, so no test sees
lost writes without this.

``PowerCutMount`` runs it for a test. Needs libfuse 3 (Debian's fuse3, which build/bootstrap.sh
installs), the Python bindings mfusepy (setup.cfg's test extra), ``/dev/fuse`` and the right to
mount (root here).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from powercut_model import PowerCutModel
else:
    from ..powercut_model import PowerCutModel

# Looking up a name that starts with this syncs everything (``PowerCutModel.sync_all``): the
# test's way to say "the kernel wrote everything back by now" while the filesystem serves.
SYNC_ALL = "/.powercut-sync-"
STAT_KEYS = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_ino", "st_blocks", "st_blksize")
MOUNT_SECONDS = 15.0


def _operations(model: PowerCutModel):
    """The FUSE operations over ``model`` (mfusepy is imported here: the model needs no FUSE)."""
    from mfusepy import FuseOSError, Operations

    class PowerCutOperations(Operations):
        """Pass-through to the backing directory; every change goes through the model. Runs in
        the filesystem's process, one request at a time."""

        use_ns = True

        def getattr(self, path, fh=None):
            if path.startswith(SYNC_ALL):
                model.sync_all()
                raise FuseOSError(errno.ENOENT)
            try:
                st = os.fstat(fh) if fh is not None else os.lstat(model.real(path))
            except OSError as e:
                raise FuseOSError(e.errno) from None
            attrs = {k: getattr(st, k) for k in STAT_KEYS}
            return {**attrs, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

        def access(self, path, amode):
            if not os.access(model.real(path), amode):
                raise FuseOSError(errno.EACCES)
            return 0

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(model.real(path))]

        def readlink(self, path):
            return os.readlink(model.real(path))

        def statfs(self, path):
            sv = os.statvfs(model.real(path))
            return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                                 "f_files", "f_flag", "f_frsize", "f_namemax")}

        def chmod(self, path, mode):
            os.chmod(model.real(path), mode)
            return 0

        def chown(self, path, uid, gid):
            os.chown(model.real(path), uid, gid, follow_symlinks=False)
            return 0

        def utimens(self, path, times=None):
            os.utime(model.real(path), ns=times, follow_symlinks=False)
            return 0

        def create(self, path, mode, flags):
            return model.open(path, (flags | os.O_CREAT) & ~os.O_APPEND, mode)

        def open(self, path, flags):
            return model.open(path, flags & ~os.O_APPEND)

        def read(self, path, size, offset, fh):
            return os.pread(fh, size, offset)

        def write(self, path, data, offset, fh):
            return model.write(fh, data, offset)

        def truncate(self, path, length, fh=None):
            model.truncate(path, length, fh)
            return 0

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            model.close(fh)
            return 0

        def fsync(self, path, datasync, fh):
            model.fsync(fh)
            return 0

        def fsyncdir(self, path, datasync, fh):
            model.fsyncdir(path)
            return 0

        def mkdir(self, path, mode):
            model.mkdir(path, mode)
            return 0

        def rmdir(self, path):
            model.rmdir(path)
            return 0

        def unlink(self, path):
            model.unlink(path)
            return 0

        def rename(self, old, new, flags=0):
            model.rename(old, new, flags)
            return 0

        def link(self, target, source):
            model.link(target, source)
            return 0

        def symlink(self, target, source):
            model.symlink(target, source)
            return 0

    return PowerCutOperations()


def serve(backing: str, mountpoint: str) -> PowerCutModel:
    """Mount and serve until unmounted; the model, with what a cut would undo."""
    from mfusepy import FUSE

    class _Fuse(FUSE):
        # mfusepy drops rename(2)'s flags: RENAME_NOREPLACE must not replace a name.
        def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
            return self.operations.rename(old.decode(self.encoding, self.errors),
                                          new.decode(self.encoding, self.errors), flags)

    model = PowerCutModel(backing, backing.rstrip("/") + ".stash")
    # One request at a time: the model's bookkeeping and the change it guards are one step.
    # hard_remove: an open file that is unlinked is unlinked (not renamed aside by libfuse).
    _Fuse(_operations(model), mountpoint, foreground=True, nothreads=True, hard_remove=True,
          fsname="powercut")
    return model


def main(argv: list[str]) -> int:
    backing, mountpoint = argv
    model = serve(os.path.abspath(backing), os.path.abspath(mountpoint))
    command, *args = sys.stdin.readline().split() or [""]
    if command == "cut":
        report = model.cut(names=float(args[0]), data=float(args[1]), seed=int(args[2]))
        print(json.dumps(dataclasses.asdict(report)), flush=True)
    return 0


class PowerCutMount:
    """``powercut_fs.py`` serving ``backing`` at ``mountpoint``, for a test: ``cut()`` is the power
    cut (everything not fsynced is lost), ``start()`` again is the machine back up. Runs in the
    test's process; the filesystem in a child process."""

    def __init__(self, backing: Path, mountpoint: Path, log: Path) -> None:
        self.backing, self.mountpoint, self.log = backing, mountpoint, log
        backing.mkdir(parents=True, exist_ok=True)
        mountpoint.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None

    def start(self) -> PowerCutMount:
        self.proc = subprocess.Popen([sys.executable, __file__, str(self.backing), str(self.mountpoint)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "a"),
                                     text=True)
        deadline = time.monotonic() + MOUNT_SECONDS
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._end("")
                raise RuntimeError(f"powercut_fs did not mount {self.mountpoint}: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def sync(self) -> None:
        """Everything written so far is durable (a sync, or the kernel's writeback catching up)."""
        assert not (self.mountpoint / f"{SYNC_ALL[1:]}{time.monotonic_ns()}").exists()

    def cut(self, *, names: float = 0.0, data: float = 0.0, seed: int = 0) -> dict:
        """Power cut: unmount (every process using it must be gone) and drop every unsynced write
        but what the kernel wrote back (``PowerCutModel.cut``)."""
        out = self._end(f"cut {names} {data} {seed}")
        return json.loads(out.strip().splitlines()[-1])

    def stop(self) -> None:
        """Clean shutdown: everything written stays."""
        if self.proc is not None:
            self._end("keep")

    def _end(self, command: str) -> str:
        assert self.proc is not None
        self._unmount()
        out, _ = self.proc.communicate(command + "\n", timeout=120)
        rc, self.proc = self.proc.returncode, None
        if rc != 0 and command != "":
            raise RuntimeError(f"powercut_fs exited {rc}: {self.log.read_text()[-2000:]}")
        return out

    def _unmount(self) -> None:
        for _ in range(50):
            if not os.path.ismount(self.mountpoint):
                return
            if subprocess.run(["fusermount3", "-u", str(self.mountpoint)], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)   # busy: a process that used it is still exiting
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=True)

    def __enter__(self) -> PowerCutMount:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
