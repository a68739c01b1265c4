#!/usr/bin/env bash
# DeltaNode benchmark: produces Milvus InsertRequests on an embedded broker, runs a DataNode
# (Spark local[2]) and a plain-Python reference on them, prints one table.
# Arguments go to the benchmark; see `build/bench.sh --help`. `--quick` for a short run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
if [ ! -x "$PY" ]; then
    bash build/bootstrap.sh || { echo "build/bench.sh: bootstrap failed" >&2; exit 1; }
fi
export PYTHONPATH="$ROOT/build:$ROOT/app${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m deltanode_bench.main "$@"
