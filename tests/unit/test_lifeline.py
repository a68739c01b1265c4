"""The driver's lifeline to its launcher: a driver whose launcher was killed before the driver
armed its watch exits at once instead of running on without one (a real child process)."""

from __future__ import annotations

import os
import subprocess
import sys

APP = os.path.join(os.path.dirname(__file__), "..", "..", "app")
ARM = "from deltanode.lifeline import exit_with_launcher; exit_with_launcher(); print('still running')"


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def run(launcher: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=APP, DELTANODE_LAUNCHER_PID=str(launcher))
    return subprocess.run([sys.executable, "-c", ARM], env=env, capture_output=True, text=True, timeout=60)


def test_a_launcher_gone_before_the_driver_armed_its_lifeline_stops_the_driver_at_once():
    out = run(dead_pid())
    assert out.returncode == 1 and "still running" not in out.stdout


def test_a_live_launcher_arms_the_watch_and_the_driver_runs_on():
    out = run(os.getpid())
    assert out.returncode == 0 and "still running" in out.stdout
