#!/usr/bin/env bash
# DeltaNode launcher: ./spark-submit.sh SUBCOMMAND [--conf FILE] [options]
#
#   standalone  everything on this machine (embedded etcd/broker as configured), conf/standalone.conf by default
#   datanode    one DataNode against the configured etcd and message queue
#   datacoord   the channel assigner
#   admin       create-collection | show-channels | show-segments | health | produce
#               (runs without Spark: plain Python on the same zip, JSON on stdout)
#   sql         Spark SQL over the lake, "QUERY" after the options: one JSON object per row on stdout
#               (the venv's Python starts its own Spark session, so stdout holds only the rows)
#
# Runs pyspark's spark-submit from .venv with --py-files build/dist/deltanode-<version>.zip
# (rebuilt when app/deltanode is newer), app/main.py as the primary file, and every spark.* key
# of the conf file (after DELTANODE_* environment overrides) as --conf key=value
# (spark.master defaults to local[2]). --help answers without starting a JVM.
# Ctrl-C / SIGTERM: the driver is asked to stop cleanly (SIGTERM); a second signal stops
# spark-submit, a third kills it. SIGKILL of this script: the driver notices within a second
# and stops cleanly, and spark-submit and its workers end with it.
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
ROOT="$(dirname "$SELF")"
VENV="$ROOT/.venv"
MAIN="$ROOT/app/main.py"

die() { echo "spark-submit.sh: $*" >&2; exit 2; }

PY="$VENV/bin/python"
for arg in "$@"; do
    case "$arg" in
        -h|--help|--version)
            # Help needs only the standard library: no JVM, not even .venv.
            [ -x "$PY" ] || PY="$(command -v python3)" || die "python3 not found; run build/bootstrap.sh"
            PYTHONPATH="$ROOT/app" exec "$PY" "$MAIN" "$@"
            ;;
    esac
done
if [ "$#" -eq 0 ]; then
    [ -x "$PY" ] || PY="$(command -v python3)" || die "python3 not found; run build/bootstrap.sh"
    PYTHONPATH="$ROOT/app" "$PY" "$MAIN" --help
    exit 2
fi

if [ ! -x "$PY" ] || [ ! -x "$VENV/bin/spark-submit" ]; then
    die "no .venv with pyspark at $VENV: run build/bootstrap.sh first"
fi
if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1; then
    die "Java 17 is required by Spark and was not found; run build/bootstrap.sh for details"
fi

# Check the command line and the conf file (with overrides) before a JVM starts, and collect
# the spark.* keys as spark-submit options.
SPARK_OPTS=()
OPTS_FILE="$(mktemp)"
trap 'rm -f "$OPTS_FILE"' EXIT
rc=0
PYTHONPATH="$ROOT/app" "$PY" -c \
    'import sys; from deltanode.cli import _spark_args_main; sys.exit(_spark_args_main(sys.argv[1:]))' \
    "$@" >"$OPTS_FILE" || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
mapfile -d '' -t SPARK_OPTS <"$OPTS_FILE"
LAUNCHER_OPTS="${SPARK_OPTS[0]}"      # first: spark-submit's launcher JVM (deltanode.config.jvm_options.launcher_options)
SPARK_OPTS=("${SPARK_OPTS[@]:1}")

# The archive the driver and the executors import deltanode from.
VERSION="$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' "$ROOT/app/deltanode/__init__.py")"
ZIP="$ROOT/build/dist/deltanode-$VERSION.zip"
if [ ! -f "$ZIP" ] || [ -n "$(find "$ROOT/app/deltanode" -name __pycache__ -prune -o -type f \
        ! -name '*.pyc' -newer "$ZIP" -print -quit)" ]; then
    bash "$ROOT/build/package.sh" -q || die "packaging failed (build/package.sh)"
fi
# This run's own link to the archive: package.sh replaces the archive by a rename when app/
# changes, and Python's zipimport reads modules by path long after start, so a node running
# while the code is updated would read another archive's bytes at its next import. The link
# keeps this run's archive; links of launchers that are gone are removed here.
RUN_DIR="$ROOT/build/dist/run"
mkdir -p "$RUN_DIR"
for old in "$RUN_DIR"/deltanode-*.zip; do
    [ -e "$old" ] || continue
    pid="${old##*-}"
    kill -0 "${pid%.zip}" 2>/dev/null || rm -f "$old"
done
ln -f "$ZIP" "$RUN_DIR/deltanode-$$.zip" || die "cannot link $ZIP into $RUN_DIR"
ZIP="$RUN_DIR/deltanode-$$.zip"
trap 'rm -f "$OPTS_FILE" "$ZIP"' EXIT

# Admin commands are clients of etcd, the broker and the Delta tables: they need no Spark, so
# they run on the venv's Python with the same zip, without a JVM. (spark-submit would also
# merge the driver's stderr into stdout, and their stdout is JSON.)
if [ "$1" = "admin" ]; then
    PYTHONPATH="$ZIP" exec "$PY" "$MAIN" "$@"
fi
# sql prints rows on stdout and errors on stderr: its Python starts the Spark session itself
# (pyspark runs spark-submit for the JVM with the same options), in client mode.
if [ "$1" = "sql" ]; then
    PYTHONPATH="$ZIP" exec "$PY" "$MAIN" "$@"
fi

export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$PY}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PY}"
# spark-submit's launcher JVM: C1 only, its class archive when bootstrap made one, its own log
# lines on stderr (its stdout is the command spark-class runs); a SPARK_LAUNCHER_OPTS of the
# environment wins.
export SPARK_LAUNCHER_OPTS="${SPARK_LAUNCHER_OPTS-$LAUNCHER_OPTS}"

# Job control puts spark-submit in its own process group, so a Ctrl-C in the terminal reaches
# only this script, which asks the Python driver to stop while the JVM is still up.
set -m
export DELTANODE_LAUNCHER_PID=$$   # the driver stops when this script is gone (app/deltanode/lifeline.py)
"$VENV/bin/spark-submit" "${SPARK_OPTS[@]}" --py-files "$ZIP" "$MAIN" "$@" &
CHILD=$!   # spark-class execs java: this is the JVM, the Python driver is its child
SIGNALS=0
forward() {
    SIGNALS=$((SIGNALS + 1))
    if [ "$SIGNALS" -eq 1 ]; then
        local drivers
        drivers="$(pgrep -P "$CHILD" -f "$MAIN" 2>/dev/null || true)"
        if [ -n "$drivers" ]; then
            echo "spark-submit.sh: stopping (signal again to stop spark-submit at once)" >&2
            # shellcheck disable=SC2086
            kill -TERM $drivers 2>/dev/null || true
        else
            kill -TERM "$CHILD" 2>/dev/null || true
        fi
    elif [ "$SIGNALS" -eq 2 ]; then
        kill -TERM "$CHILD" 2>/dev/null || true
    else
        kill -KILL "$CHILD" 2>/dev/null || true
    fi
}
trap forward INT TERM HUP
rc=0
while :; do
    wait "$CHILD" && rc=0 || rc=$?
    kill -0 "$CHILD" 2>/dev/null || break
done
trap - INT TERM HUP
exit "$rc"
