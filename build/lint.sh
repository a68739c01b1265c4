#!/usr/bin/env bash
# Lint: ruff (rules in build/ruff.toml: ruff reads no setup.cfg) over app/, tests/ and build/,
# and mypy (its [mypy] section in setup.cfg) over the deltanode package. Both always run; one
# line per tool says how it went, and the exit status is non-zero if either failed.
# Both come with the [test] extras (build/bootstrap.sh installs them).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

failed=0

if .venv/bin/ruff check --config build/ruff.toml app tests build; then
    echo "lint: ruff ok"
else
    echo "lint: ruff FAILED" >&2
    failed=1
fi

if .venv/bin/mypy --config-file setup.cfg; then
    echo "lint: mypy ok"
else
    echo "lint: mypy FAILED" >&2
    failed=1
fi

exit "$failed"
