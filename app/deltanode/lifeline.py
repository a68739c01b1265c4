"""The driver never outlives what started it (runs on the driver, before anything else).

``./spark-submit.sh`` starts spark-submit (the JVM) in a process group of its own, so that a
Ctrl-C reaches only the launcher, which asks the driver to stop cleanly. The price: killing
the launcher, or its process group, with SIGKILL would leave the JVM, the Python driver and
its workers running, still committing the node's channels. Two lifelines close that gap:

- ``exit_with_parent``: the kernel sends the driver SIGTERM when the JVM that started it dies;
- ``exit_with_launcher``: a thread watches the launcher (``DELTANODE_LAUNCHER_PID``) and sends
  the driver SIGTERM once it is gone, then exits hard if the clean stop takes too long. When
  the driver exits, spark-submit's JVM exits, and pyspark's workers with it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from .logs import flush_logs

log = logging.getLogger("deltanode")
LAUNCHER_PID = "DELTANODE_LAUNCHER_PID"
POLL_INTERVAL = 1.0
STOP_GRACE = 45.0   # a clean stop: the running cycle, the session, Spark (bounded to 30 s)


def exit_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Under spark-submit (PythonRunner), ask Linux to send ``sig`` to this process when the JVM
    that started it dies, so a killed spark-submit never leaves the driver (and the services it
    started) running. Returns True when armed."""
    if not sys.platform.startswith("linux") or "PYSPARK_GATEWAY_PORT" not in os.environ:
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        parent = os.getppid()
        if libc.prctl(1, int(sig), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)
    return True


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def exit_with_launcher(sig: int = signal.SIGTERM) -> bool:
    """When ``DELTANODE_LAUNCHER_PID`` names a process other than this one, stop this process
    once that one is gone (compared by start time, so a reused pid does not count); at once when
    it is gone already: a launcher killed while the JVM was still starting the driver. Returns
    True when armed."""
    try:
        pid = int(os.environ.get(LAUNCHER_PID, ""))
    except ValueError:
        return False
    if not sys.platform.startswith("linux") or pid == os.getpid():
        return False
    started = _start_time(pid)
    if started is None:
        log.error("the launcher (spark-submit.sh, pid %d) is gone before the driver started: exiting", pid)
        flush_logs()
        os._exit(1)

    def watch() -> None:
        while _start_time(pid) == started:
            time.sleep(POLL_INTERVAL)
        log.error("the launcher (spark-submit.sh, pid %d) is gone: stopping", pid)
        os.kill(os.getpid(), sig)
        time.sleep(STOP_GRACE)
        log.error("still running %.0f s after the launcher died: exiting now", STOP_GRACE)
        flush_logs()
        os._exit(1)

    threading.Thread(target=watch, name="launcher-lifeline", daemon=True).start()
    return True
