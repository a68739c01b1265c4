"""The packages' dependencies point one way, read from their import lines (function-level imports
and ``TYPE_CHECKING`` ones included): the wire formats and the configuration at the bottom (the
conf read into typed sections, and the Spark/JVM launch options: every layer takes its section
from ``config``, and ``config`` makes no object of a layer above it), brokers and etcd above them,
storage and the shared records above those, the executor (a Spark task's code) above those, the
driver's stages above it, and the processes (DataNode, coordinator, standalone, admin, lake, the
command line) on top. docs/architecture.md draws the same layers."""

import ast
from pathlib import Path

import deltanode

APP = Path(deltanode.__file__).parents[1]
PACKAGE = APP / "deltanode"

# What each package may import of deltanode's packages and top-level modules. A package not named
# here is a process on top (datanode, datacoord, standalone, admin, lake, cli) or a leaf module.
BASE = {"logs", "failure", "outages", "config"}
DATA = {"records", "delta", "state", "wire"}
MAY_IMPORT = {
    "wire": {"failure"},   # its errors are based on failure.errors, standard library only
    "logs": set(),
    "outages": set(),
    "failure": {"logs"},
    "config": {"wire", "logs", "failure"},
    "mq": {"wire"} | BASE,
    "etcd": {"wire"} | BASE,
    "delta": {"wire"} | BASE,
    "records": {"delta", "mq", "failure"},   # mq for its Broker type only (test_executor_imports holds that)
    "state": {"delta", "records", "wire"} | BASE,
    "executor": DATA | {"mq"} | BASE,
    "vchannel": DATA | {"executor"} | BASE,
    # The Spark job contract and its launcher: above the executor, whose functions its kinds run,
    # below the driver's stages that declare and launch the kinds.
    "jobs": DATA | {"executor"} | BASE,
    "milvus_import": DATA | {"vchannel", "executor", "etcd", "mq", "jobs"} | BASE,
    "pipeline": DATA | {"vchannel", "milvus_import", "executor", "mq", "jobs"} | BASE,
}


def _imports(module_file: Path) -> set[str]:
    """The deltanode packages and top-level modules a file imports, by their first name under deltanode."""
    parts = module_file.relative_to(APP).with_suffix("").parts
    package = ".".join(parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(module_file.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names = [module] + ([f"{module}.{a.name}" for a in node.names] if node.module is None else [])
        else:
            continue
        found.update(n.split(".")[1] for n in names if n.startswith("deltanode.") and n.count(".") >= 1)
    return found


def _package_of(module_file: Path) -> str:
    return module_file.relative_to(PACKAGE).parts[0].removesuffix(".py")


def test_each_layer_imports_only_the_layers_below_it():
    wrong = []
    for f in sorted(PACKAGE.rglob("*.py")):
        own = _package_of(f)
        if own not in MAY_IMPORT:
            continue
        for name in sorted(_imports(f) - {own} - MAY_IMPORT[own]):
            wrong.append(f"{f.relative_to(APP)} imports deltanode.{name}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_layer_table_names_real_packages_and_no_process():
    """The processes (a DataNode, the coordinator, standalone, admin, lake, the command line)
    sit on top: no layer may import them, so a layer runs and is tested without them."""
    names = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    assert set(MAY_IMPORT) <= names and all(allowed <= names for allowed in MAY_IMPORT.values())
    processes = {"datanode", "datacoord", "standalone", "admin", "cli", "lake"}
    assert not processes & set(MAY_IMPORT) and all(not processes & a for a in MAY_IMPORT.values())
