"""DeltaNode processes started the way a user starts them (``spark-submit.sh``), and their trees."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
from pathlib import Path

from .support import wait_until

ROOT = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (spark-submit puts the JVM in a group of its own,
    and pyspark's worker daemon makes yet another: a process-group kill would miss some)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[ppid].append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def start(what: str, conf: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([str(ROOT / "spark-submit.sh"), what, "--conf", str(conf)], cwd=ROOT, env=env,
                            stdout=open(log, "a"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the launcher's whole tree; every process of it must be gone within 60 s."""
    tree = descendants(proc.pid)
    for pid in tree:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    wait_until(lambda: not [p for p in tree if Path(f"/proc/{p}").exists() and not zombie(p)], 60,
               f"every process of {proc.args[1]} to exit after {signal.Signals(sig).name}")


def stop_running(*procs: subprocess.Popen) -> None:
    """SIGTERM to each of ``procs`` still running (a test's cleanup), every process of it gone."""
    for proc in procs:
        if proc.poll() is None:
            stop(proc, signal.SIGTERM)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
