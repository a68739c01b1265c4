"""``./spark-submit.sh admin ...`` run by the command's own function in the test's process.

A wait that polls what an admin command shows (a collection's rows, its state) polls here: each
call through the launcher starts two interpreters and looks for changed sources, seconds of CPU on
a machine the node under test shares. The command line is parsed by the CLI's own parser and the
conf read as the CLI reads it (the file, then ``env``'s ``DELTANODE_*`` overrides), so a poll sees
what the command shows. The tests that assert on a command itself run it through the launcher.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Mapping
from pathlib import Path

from deltanode.admin import commands
from deltanode.cli import parse_args
from deltanode.config import load_conf

ROOT = Path(__file__).resolve().parents[2]


def admin_in_process(env: Mapping[str, str], conf: str, *argv: str) -> tuple[int, object]:
    """``admin *argv --conf conf`` (``conf`` relative to the repository, as the tests run the
    launcher from there): its exit code, and its JSON (or its stderr when it failed)."""
    args = parse_args(["admin", *argv, "--conf", conf])
    run = getattr(commands, args.admin_command.replace("-", "_"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(load_conf(ROOT / conf, env, base_dir=ROOT), args)
    return rc, (json.loads(out.getvalue()) if rc == 0 and out.getvalue().strip() else err.getvalue())
