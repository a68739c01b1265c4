#!/usr/bin/env bash
# Set up this checkout: .venv at the repo root with everything setup.cfg lists (plus the
# [test] extras), the etcd binary (Debian package etcd-server), libfuse 3 for the power-cut tests
# (Debian package fuse3), a Java 17 check, and the JVM
# components from Maven Central (build/jvm_components.py: Apache Kafka, Delta Lake for Spark).
# Idempotent and silent when everything is in place: pip runs only when setup.cfg (or the
# Python version) changed since the last successful install.
# Env: PYTHON=/path/to/python3.11+ to choose the interpreter for a new .venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
STAMP="$VENV/.deltanode-bootstrap"

say() { echo "bootstrap: $*" >&2; }
die() { echo "bootstrap: error: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root for: $*"; fi
}

py_ok() {  # $1: interpreter; true when it is Python >= 3.11
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}

# --- Java 17 (Spark 4.2 runs on Java 17 or 21) -------------------------------------------
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/java}"
[ -n "$JAVA" ] && [ -x "$JAVA" ] || JAVA="$(command -v java || true)"
if [ -z "$JAVA" ]; then
    die "Java 17 is required by Spark and was not found (no java on PATH, JAVA_HOME unset).
  Install it, e.g.: apt-get install -y openjdk-17-jre-headless"
fi
JAVA_MAJOR="$("$JAVA" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -1)"
if [ -z "$JAVA_MAJOR" ] || [ "$JAVA_MAJOR" -lt 17 ]; then
    die "Java 17 is required by Spark; $JAVA is version '${JAVA_MAJOR:-unknown}'.
  Install it (apt-get install -y openjdk-17-jre-headless) and put it first on PATH or set JAVA_HOME."
fi

# --- etcd ----------------------------------------------------------------------------
if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
    say "etcd not found: installing the Debian package etcd-server"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null \
        || die "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server >/dev/null \
        || die "apt-get install etcd-server failed"
    command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || die "etcd still missing after install"
fi

# --- libfuse 3 (the power-cut tests' filesystem, tests/integration/powercut_fs.py) ----------
if ! command -v fusermount3 >/dev/null 2>&1; then
    say "fusermount3 not found: installing the Debian package fuse3"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null \
        || die "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q fuse3 >/dev/null \
        || die "apt-get install fuse3 failed"
fi

# --- Maven and a JDK (fetch the JVM components, build their small launchers) ---------------
if ! command -v mvn >/dev/null 2>&1; then
    say "mvn not found: installing the Debian package maven"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null \
        || die "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven >/dev/null \
        || die "apt-get install maven failed"
fi
if ! command -v javac >/dev/null 2>&1; then
    say "javac not found: installing the Debian package openjdk-17-jdk-headless"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null \
        || die "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless >/dev/null \
        || die "apt-get install openjdk-17-jdk-headless failed"
fi

# --- .venv ---------------------------------------------------------------------------
if [ -x "$VENV/bin/python" ] && ! py_ok "$VENV/bin/python"; then
    say ".venv has Python < 3.11: recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    PY=""
    for cand in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
        if command -v "$cand" >/dev/null 2>&1 && py_ok "$(command -v "$cand")"; then
            PY="$(command -v "$cand")"; break
        fi
    done
    [ -n "$PY" ] || die "Python >= 3.11 is required (tried ${PYTHON:-} python3.13 python3.12 python3.11 python3)"
    say "creating .venv with $PY"
    "$PY" -m venv "$VENV" || die "python -m venv failed (on Debian: apt-get install -y python3-venv)"
fi

# --- packages from setup.cfg ---------------------------------------------------------
WANT="$( { sha256sum setup.cfg; "$VENV/bin/python" -V; } 2>&1 | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
    say "installing the packages listed in setup.cfg (the first time builds pyspark: 1-2 min)"
    REQS="$(mktemp)"
    trap 'rm -f "$REQS"' EXIT
    # install_requires + [test] and [bench] extras, read from setup.cfg (like pip install -e .[test,bench],
    # without writing egg-info into app/)
    "$VENV/bin/python" - setup.cfg >"$REQS" <<'EOF'
import configparser, sys
cp = configparser.ConfigParser()
cp.read(sys.argv[1])
lines = cp.get("options", "install_requires", fallback="").splitlines()
lines += cp.get("options.extras_require", "test", fallback="").splitlines()
lines += cp.get("options.extras_require", "bench", fallback="").splitlines()
for line in lines:
    line = line.split("#", 1)[0].strip()
    if line:
        print(line)
EOF
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS" \
        || die "pip install failed"
    echo "$WANT" >"$STAMP"
fi

# The package itself, importable from the sources (an editable install without egg-info).
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ "$(cat "$SITE/deltanode.pth" 2>/dev/null || true)" != "$ROOT/app" ]; then
    echo "$ROOT/app" >"$SITE/deltanode.pth"
fi

# The JVM components (build/jvm/*/pom.xml) from Maven Central, once per pom (and pyspark) change;
# Maven keeps its downloads in ~/.m2, so a fresh checkout copies them offline.
"$VENV/bin/python" "$ROOT/build/jvm_components.py" --quiet || die "fetching the JVM components failed"

# The classes the embedded Apache Pulsar loads at start, archived once per set of its jars (they
# live in the jars' directory, which a new set replaces): a producer is served in ~10 s instead of
# ~15-20 s (docs/pulsar.md). An optimisation, so a failure only warns.
PULSAR_CDS="$("$VENV/bin/python" -c 'from deltanode.standalone.pulsar_server import class_archive; print(class_archive())')"
if [ ! -f "$PULSAR_CDS" ] && [ ! -f "$PULSAR_CDS.failed" ]; then
    say "archiving the classes Apache Pulsar loads at start-up (once, ~40 s)"
    if ! "$VENV/bin/python" "$ROOT/build/pulsar_cds.py" >"$PULSAR_CDS.log" 2>&1; then
        touch "$PULSAR_CDS.failed"
        say "warning: no class archive for Pulsar (see $PULSAR_CDS.log); it starts without one, ~5-10 s slower"
    fi
fi

# Spark starts its Python processes with pyspark.zip first on PYTHONPATH; with bytecode in the
# zip each one starts ~0.4 s sooner (build/zip_pyc.py). Again after pip replaced the zip.
"$VENV/bin/python" "$ROOT/build/zip_pyc.py" --if-missing "$SITE"/pyspark/python/lib/*.zip \
    || die "adding bytecode to pyspark's zips failed"

# The classes a DataNode's driver JVM loads at start, archived once for class data sharing
# (app/deltanode/config/jvm_options.py: SparkSession ~2 s and warm-up ~1 s sooner). Again when Java or pyspark
# changed, or what it records (or the checkout moved); an optimisation, so a failure only warns (delete
# .venv/share/deltanode/ to try again).
CDS="$("$VENV/bin/python" -c 'from deltanode.config.jvm_options import cds_archive; print(cds_archive())')"
CDS_WANT="$( { echo "$VENV"; "$JAVA" -version 2>&1; "$VENV/bin/python" -c \
    'import importlib.metadata as m; print(m.version("pyspark"))'; \
    cat "$ROOT/build/cds_archive.py" "$ROOT/app/deltanode/pipeline/warmup.py"; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$CDS.stamp" 2>/dev/null || true)" != "$CDS_WANT" ]; then
    say "archiving the classes Spark loads at start-up (once, ~25 s)"
    mkdir -p "$(dirname "$CDS")"
    rm -f "$CDS" "$CDS.stamp"
    if ! "$VENV/bin/python" "$ROOT/build/cds_archive.py" "$CDS" >"$CDS.log" 2>&1; then
        rm -f "$CDS"
        say "warning: no class archive (see $CDS.log); Spark starts without it, ~3 s slower"
    fi
    echo "$CDS_WANT" >"$CDS.stamp"   # tried for this Java and pyspark: not again on every run
fi
