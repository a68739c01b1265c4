"""How the code base is shaped: the largest classes and modules, the import graph's cycles, and
what a Spark task imports. ``.venv/bin/python build/house_report.py [APP_DIR]`` prints tables
(APP_DIR defaults to this checkout's app/; give another checkout's to compare two trees).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a task's Python worker imports: the modules of the functions Spark runs on executors
# (pipeline tasks, delete marking, compaction rewrites), in this tree and before the executor
# package existed.
TASK_ENTRY_POINTS = (("deltanode.executor.task", "deltanode.jobs.contract", "deltanode.executor.delete_mark_task",
                      "deltanode.executor.rewrite_task"),
                     ("deltanode.pipeline.task", "deltanode.executor.delete_marks", "deltanode.state.compaction_plan"))


def modules(app: Path) -> dict[str, Path]:
    return {".".join(p.relative_to(app).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(app.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports (``TYPE_CHECKING`` ones included)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in known else base)
    return {m for m in out if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def classes(mods: dict[str, Path]) -> list[tuple[int, int, str]]:
    """(lines, methods, name) of every class."""
    out = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)
                out.append((node.end_lineno - node.lineno + 1, methods, f"{name}.{node.name}"))
    return sorted(out, reverse=True)


def task_imports(app: Path, mods: dict[str, Path]) -> list[str]:
    """The modules a Python worker has loaded once it imported the task entry points (run in a
    fresh interpreter on ``app``)."""
    entries = next([m for m in group if m in mods] for group in TASK_ENTRY_POINTS if group[0] in mods)
    code = (f"import sys; sys.path.insert(0, {str(app)!r}); " + "; ".join(f"import {m}" for m in entries)
            + "; print('\\n'.join(sorted(m for m in sys.modules if m.startswith('deltanode') or m.split('.')[0] in "
              "('deltalake', 'pyspark', 'aetcd', 'grpc', 'boto3', 'prometheus_client'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return sorted({m if m.startswith("deltanode") else m.split(".")[0] for m in done.stdout.split()})


def main() -> int:
    app = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "app"
    mods = modules(app)
    graph = {name: imports(name, path, set(mods)) for name, path in mods.items()}
    print(f"code base: {app}")
    print("\nlargest classes (lines, methods):")
    for lines, methods, name in classes(mods)[:5]:
        print(f"  {lines:5d} {methods:3d}  {name}")
    print("\nlargest modules (lines):")
    for lines, name in sorted(((len(p.read_text().splitlines()), n) for n, p in mods.items()), reverse=True)[:5]:
        print(f"  {lines:5d}  {name}")
    found = cycles(graph)
    print(f"\nimport cycles: {len(found)}")
    for comp in found:
        print("  " + " <-> ".join(comp))
    loaded = task_imports(app, mods)
    ours = [m for m in loaded if m.startswith("deltanode")]
    print(f"\na Spark task imports {len(ours)} deltanode modules, and of the driver's libraries: "
          f"{', '.join(m for m in loaded if not m.startswith('deltanode')) or 'none'}")
    packages = defaultdict(list)
    for m in ours:
        packages[".".join(m.split(".")[:2])].append(m.split(".")[-1])
    for package, names in sorted(packages.items()):
        print(f"  {package}: {', '.join(sorted(names))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
