#!/usr/bin/env bash
# Bootstrap (idempotent), lint (build/lint.sh: ruff and mypy; a finding fails the run before
# any test), then run the whole test suite. Extra arguments go to pytest,
# e.g. build/test.sh -k config -x; with a path among them only those paths run
# (build/test.sh tests/unit).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash build/bootstrap.sh || { echo "build/test.sh: bootstrap failed" >&2; exit 1; }
bash build/lint.sh || { echo "build/test.sh: lint failed" >&2; exit 1; }
bash build/milvus_env.sh || { echo "build/test.sh: the real-Milvus environment failed" >&2; exit 1; }
bash build/milvus_wal.sh >/dev/null || { echo "build/test.sh: building the Milvus 2.6 WAL writer (tests/milvus_wal) failed" >&2; exit 1; }

TARGET=(tests)
for arg in "$@"; do
    case "$arg" in -*) ;; *) [ -e "${arg%%::*}" ] && TARGET=() ;; esac
done
# Two workers, each given whole test files (their module fixtures start once); most of a test's time
# is spent waiting on brokers, processes and clocks, so two overlap well on two cores.
# DELTANODE_TEST_WORKERS=0 runs everything in this one process.
WORKERS=(-n "${DELTANODE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
[ "${DELTANODE_TEST_WORKERS:-2}" = 0 ] && WORKERS=()
.venv/bin/python -m pytest "${TARGET[@]}" -q -rs "${WORKERS[@]}" "$@"   # -rs: every skip prints its reason
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "build/test.sh: pytest collected no tests (exit 5): treating that as a failure" >&2
fi
exit "$rc"
