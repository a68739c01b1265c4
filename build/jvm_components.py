#!/usr/bin/env python3
"""Fetch the JVM components DeltaNode runs (Kafka, Pulsar, Delta and S3A for Spark, YARN) from Maven Central.

``build/jvm_components.py``: for each ``build/jvm/NAME/pom.xml``, the jars it names with their
runtime dependencies land in ``.venv/share/deltanode/jars/NAME/`` (``deltanode.config.jars`` finds them
there). Maven keeps what it downloaded in ``~/.m2/repository``, so a fresh checkout on the same
machine copies them without the network. A component is fetched again only when its pom, or the
pyspark it sits beside, changed (a stamp file in its directory); nothing is fetched at run time.

A pom with the property ``deltanode.beside.spark`` holds jars for Spark's class path: every jar
whose artifact pyspark already ships (Hadoop, Jackson, Parquet, Scala, log4j...) is left out, so
Spark's own versions are the only ones loaded.

A component with Java sources in ``build/jvm/NAME/src/`` (a small launcher: a main class the
component's own jars lack; or classes to load into Spark) gets them compiled against its jars, and
pyspark's for a component beside Spark, into ``deltanode-NAME-launcher.jar`` in the same directory,
so one class path runs it.

``build/bootstrap.sh`` runs this; it needs ``mvn`` (Debian's ``maven``, which bootstrap installs).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POMS = ROOT / "build" / "jvm"
STAMP = ".stamp"
# "kafka-clients-3.9.1.jar" -> "kafka-clients"; "delta-spark_4.2_2.13-4.4.0.jar" -> "delta-spark_4.2_2.13"
_ARTIFACT = re.compile(r"^(?P<name>.+?)-\d[^-]*(?:-[^-]+)?\.jar$")


def artifact(jar: str) -> str:
    match = _ARTIFACT.match(jar)
    return match.group("name") if match else jar


def spark_jars() -> set[str]:
    """The artifacts pyspark ships in its ``jars/`` directory."""
    return {artifact(p.name) for p in spark_jars_dir().glob("*.jar")}


def target_dir(name: str) -> Path:
    return Path(sys.prefix) / "share" / "deltanode" / "jars" / name


def sources(pom: Path) -> list[Path]:
    return sorted((pom.parent / "src").glob("*.java"))


def wanted_stamp(pom: Path, beside_spark: bool) -> str:
    digest = hashlib.sha256(pom.read_bytes())
    for source in sources(pom):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    if beside_spark:
        digest.update(importlib.metadata.version("pyspark").encode())
    return digest.hexdigest()


def fetch(pom: Path, quiet: bool) -> None:
    name = pom.parent.name
    beside_spark = "<deltanode.beside.spark>true</deltanode.beside.spark>" in pom.read_text()
    target = target_dir(name)
    want = wanted_stamp(pom, beside_spark)
    stamp = target / STAMP
    if stamp.is_file() and stamp.read_text().strip() == want:
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("build/jvm_components.py: mvn not found (Debian: apt-get install -y maven); "
                         f"it fetches {name}'s jars from Maven Central")
    if not quiet:
        print(f"jvm_components: fetching {name} ({pom.relative_to(ROOT)}) from Maven Central", file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        run = subprocess.run([mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                              "-DincludeScope=runtime", f"-DoutputDirectory={staging}"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"build/jvm_components.py: Maven could not fetch {name} ({pom}):\n"
                             f"{(run.stdout + run.stderr)[-3000:]}")
        if beside_spark:
            shipped = spark_jars()
            for jar in staging.glob("*.jar"):
                if artifact(jar.name) in shipped:
                    jar.unlink()
        if not any(staging.glob("*.jar")):
            raise SystemExit(f"build/jvm_components.py: Maven copied no jar for {name} ({pom})")
        if sources(pom):
            compile_launcher(name, sources(pom), staging, spark_jars_dir() if beside_spark else None)
        jars = sorted(p.name for p in staging.glob("*.jar"))
        (staging / STAMP).write_text(want + "\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not quiet:
        print(f"jvm_components: {name}: {len(jars)} jars in {target}", file=sys.stderr)


def spark_jars_dir() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent / "jars"


def compile_launcher(name: str, java_sources: list[Path], jars: Path, also: Path | None = None) -> None:
    """Compile ``java_sources`` against the jars in ``jars`` (and in ``also``) into
    ``deltanode-NAME-launcher.jar`` in ``jars``."""
    for tool in ("javac", "jar"):
        if shutil.which(tool) is None:
            raise SystemExit(f"build/jvm_components.py: {tool} not found (a JDK 17: Debian's openjdk-17-jdk-headless); "
                             f"it builds {name}'s launcher")
    with tempfile.TemporaryDirectory(prefix=f"{name}-classes-") as classes:
        class_path = f"{jars}/*" + (f":{also}/*" if also else "")
        for command in (["javac", "-nowarn", "--release", "17", "-cp", class_path, "-d", classes,
                         *map(str, java_sources)],
                        ["jar", "cf", str(jars / f"deltanode-{name}-launcher.jar"), "-C", classes, "."]):
            run = subprocess.run(command, capture_output=True, text=True)
            if run.returncode != 0:
                raise SystemExit(f"build/jvm_components.py: building {name}'s launcher failed ({command[0]}):\n"
                                 f"{(run.stdout + run.stderr)[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="build/jvm_components.py", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="components to fetch (default: every build/jvm/*/pom.xml)")
    p.add_argument("-q", "--quiet", action="store_true", help="say nothing when everything is in place")
    args = p.parse_args(argv)
    poms = sorted(POMS.glob("*/pom.xml"))
    if args.names:
        poms = [pom for pom in poms if pom.parent.name in args.names]
        missing = set(args.names) - {pom.parent.name for pom in poms}
        if missing:
            p.error(f"no such component: {', '.join(sorted(missing))} (build/jvm/*/pom.xml)")
    for pom in poms:
        fetch(pom, args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
