#!/usr/bin/env bash
# Package app/deltanode as build/dist/deltanode-<version>.zip, the archive that
# spark-submit --py-files takes (version from app/deltanode/__init__.py).
# Usage: build/package.sh [-q]     prints the archive's path unless -q.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUIET=0
[ "${1:-}" = "-q" ] && QUIET=1

PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY="$(command -v python3 || true)"
if [ -z "$PY" ]; then
    echo "build/package.sh: python3 not found; run build/bootstrap.sh" >&2
    exit 1
fi

VERSION="$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' "$ROOT/app/deltanode/__init__.py")"
if [ -z "$VERSION" ]; then
    echo "build/package.sh: no __version__ in app/deltanode/__init__.py" >&2
    exit 1
fi
ZIP="$ROOT/build/dist/deltanode-$VERSION.zip"
mkdir -p "$ROOT/build/dist"

# Written aside, given its bytecode (build/zip_pyc.py: executors import from it without compiling),
# then renamed into place once: Python's zipimport keeps an archive's table of contents and reads
# the modules later by path, so a process that started on one archive must not meet another.
TMP="$("$PY" - "$ROOT/app" "$ZIP" <<'EOF'
import os, sys, tempfile, zipfile
src, out = sys.argv[1], sys.argv[2]
fd, tmp = tempfile.mkstemp(prefix=".deltanode-", suffix=".zip", dir=os.path.dirname(out))
os.close(fd)
try:
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirnames, filenames in os.walk(os.path.join(src, "deltanode")):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")) or name.startswith("."):
                    continue
                path = os.path.join(dirpath, name)
                z.write(path, os.path.relpath(path, src))
    os.chmod(tmp, 0o644)
    print(tmp)
except BaseException:
    os.unlink(tmp)
    raise
EOF
)"
"$PY" "$ROOT/build/zip_pyc.py" "$TMP" 2>/dev/null || true   # without bytecode it works, just slower
mv -f "$TMP" "$ZIP"
[ "$QUIET" = 1 ] || echo "$ZIP"
