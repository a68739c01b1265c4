"""The warm-up's task does what its docstring says, in a process of its own as a fresh worker:
it imports what a cycle's task and a delete-marking task import, and decodes an InsertRequest."""

import subprocess
import sys
from pathlib import Path

import deltanode

APP = Path(deltanode.__file__).parents[1]


def test_a_warm_up_task_imports_a_task_s_modules_and_decodes_a_message_in_its_worker():
    code = (f"import os, sys; sys.path.insert(0, {str(APP)!r}); "
            "from deltanode.pipeline.warmup import _load_task_modules; "
            "before = set(sys.modules); w = _load_task_modules(0); "
            "assert w.pid == os.getpid(), w; print(w.rows); print('\\n'.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    rows, loaded = int(out[0]), set(out[1:])
    assert rows == 2
    wanted = {"deltanode.executor.task", "deltanode.executor.decode", "deltanode.executor.delete_mark_task",
              "deltanode.executor.binlog_writer", "deltanode.executor.dispatch", "pyarrow", "numpy"}
    assert wanted <= loaded, f"not loaded by the warm-up: {sorted(wanted - loaded)}"
