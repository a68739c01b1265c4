"""The fault points: a pause stops its process at the n-th hit, until SIGCONT; a DataNode's conf
takes the fault variables a test sets for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from deltanode.config import load_conf
from deltanode.failure.crash_points import CRASH_AT, CRASH_DIR, PAUSE_AT, paused_marker

APP = Path(__file__).resolve().parents[2] / "app"
# Reaches the point three times, printing a line before each hit and one at the end.
HITS = ("import sys\nfrom deltanode.failure.crash_points import crash_point\n"
        "for i in range(3):\n    print(f'hit {i + 1}', flush=True)\n    crash_point('here')\n"
        "print('done', flush=True)\n")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait(predicate, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_pause_stops_the_process_at_the_nth_hit_until_it_is_continued(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != CRASH_AT}
    env.update({PAUSE_AT: "here:2", CRASH_DIR: str(tmp_path), "PYTHONPATH": str(APP)})
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", HITS], env=env, stdout=f)
    try:
        marker = paused_marker("here", str(tmp_path))
        _wait(lambda: os.path.exists(marker), "the pause's marker")
        assert int(Path(marker).read_text()) == proc.pid
        _wait(lambda: _state(proc.pid) == "T", "the process to be stopped")
        time.sleep(0.3)   # stopped: it prints nothing past the second hit
        assert out.read_text().split() == ["hit", "1", "hit", "2"] and proc.poll() is None
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.read_text().splitlines() == ["hit 1", "hit 2", "hit 3", "done"]   # one pause only


def test_a_datanode_conf_takes_the_fault_variables(tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("storage.root = d\n")
    env = {CRASH_AT: "after_commit:2", PAUSE_AT: "after_side_commits", CRASH_DIR: str(tmp_path)}
    assert load_conf(conf, env, base_dir=tmp_path).get("storage.root") == str(tmp_path / "d")
