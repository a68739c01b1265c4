#!/usr/bin/env bash
# The real-Milvus side environment the integration tests drive (tests/integration/milvus_server.py,
# milvus_client.py): .venv-milvus at the repo root with the PyPI wheel milvus==2.3.5 (the real
# Milvus 2.3.5 standalone server, lzma-packed) and its client pymilvus 2.3.8, which needs
# protobuf < 5 and so cannot share .venv (protobuf 7).
# Then, once: the server unpacked into .venv-milvus/share/milvus/ (bin/milvus, lib/*.so*, the
# config template, glog.conf); the server runs with the wheel's own libraries, its librdkafka 1.9.1
# among them, which talks to the embedded Apache Kafka 3.9 as it is (docs/platform.md).
# Idempotent and silent when everything is in place: pip runs only when the package list below (or
# the Python version) changed since the last successful install. Needs .venv (build/bootstrap.sh).
# Env: PYTHON=/path/to/python3.11+ to choose the interpreter for a new .venv-milvus.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv-milvus"
MAIN_VENV="$ROOT/.venv"
STAMP="$VENV/.milvus-env"
SHARE="$VENV/share/milvus"

# pymilvus 2.3.8 imports pkg_resources (setuptools < 70), its generated code needs protobuf < 5,
# its environs 9.5 breaks on marshmallow 4; pandas 3 is pinned out like in .venv.
PACKAGES=(
    "milvus==2.3.5"
    "pymilvus==2.3.8"
    "setuptools<70"
    "protobuf<5"
    "marshmallow<4"
    "pandas<3"
)

say() { echo "milvus_env: $*" >&2; }
die() { echo "milvus_env: error: $*" >&2; exit 1; }

py_ok() {  # $1: interpreter; true when it is Python >= 3.11
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}

[ -x "$MAIN_VENV/bin/python" ] || die "$MAIN_VENV is missing: run build/bootstrap.sh first"

# --- .venv-milvus ------------------------------------------------------------------------
if [ -x "$VENV/bin/python" ] && ! py_ok "$VENV/bin/python"; then
    say ".venv-milvus has Python < 3.11: recreating it"
    rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
    # The interpreter .venv was made from first (grpcio <= 1.60, which pymilvus 2.3.8 requires,
    # has wheels up to Python 3.12 only).
    BASE="$("$MAIN_VENV/bin/python" -c 'import sys; print(sys._base_executable)' 2>/dev/null || true)"
    PY=""
    for cand in ${PYTHON:-} "$BASE" python3.11 python3.12 python3; do
        if command -v "$cand" >/dev/null 2>&1 && py_ok "$(command -v "$cand")"; then
            PY="$(command -v "$cand")"; break
        fi
    done
    [ -n "$PY" ] || die "Python >= 3.11 is required (tried ${PYTHON:-} $BASE python3.11 python3.12 python3)"
    say "creating .venv-milvus with $PY"
    "$PY" -m venv "$VENV" || die "python -m venv failed (on Debian: apt-get install -y python3-venv)"
fi

# --- packages ------------------------------------------------------------------------
WANT="$( { printf '%s\n' "${PACKAGES[@]}"; "$VENV/bin/python" -V; } 2>&1 | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
    say "installing ${PACKAGES[*]} (the milvus wheel is ~58 MB)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PACKAGES[@]}" \
        || die "pip install into .venv-milvus failed"
    "$VENV/bin/python" -c 'import pymilvus, milvus' \
        || die "pymilvus or milvus does not import in .venv-milvus after the install"
    echo "$WANT" >"$STAMP"
fi

# --- the server, unpacked ------------------------------------------------------------------
# Like the wheel's own milvus/__init__.py (_initialize_data_files): every data/bin/*.lzma is an
# lzma stream of the file without the suffix. Stamped with the wheel's RECORD (sha256 of each file).
PKG="$("$VENV/bin/python" -c 'import milvus, os; print(os.path.dirname(milvus.__file__))')" \
    || die "the milvus package is missing from .venv-milvus"
RECORD="$(ls "$PKG"/../milvus-*.dist-info/RECORD 2>/dev/null | head -1 || true)"
[ -n "$RECORD" ] || die "no milvus-*.dist-info/RECORD next to $PKG"
# "layout N": bump N when the unpacking below changes
UNPACK_WANT="$( { echo "layout 1"; sha256sum <"$RECORD"; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$SHARE/.unpacked" 2>/dev/null || true)" != "$UNPACK_WANT" ] || [ ! -x "$SHARE/bin/milvus" ]; then
    say "unpacking the Milvus 2.3.5 server into ${SHARE#"$ROOT"/}"
    rm -rf "$SHARE.tmp"
    mkdir -p "$SHARE.tmp/bin" "$SHARE.tmp/lib"
    "$VENV/bin/python" - "$PKG/data" "$SHARE.tmp" <<'EOF' || die "unpacking the milvus wheel's data failed"
import lzma, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
packed = sorted(f for f in os.listdir(os.path.join(src, "bin")) if f.endswith(".lzma"))
if "milvus.lzma" not in packed:
    sys.exit(f"no bin/milvus.lzma in {src}")
for name in packed:
    out = os.path.join(dst, "bin" if name == "milvus.lzma" else "lib", name[:-len(".lzma")])
    with lzma.open(os.path.join(src, "bin", name)) as fin, open(out, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    os.chmod(out, 0o755)
for name in ("config.yaml.template", "glog.conf"):
    shutil.copy(os.path.join(src, name), os.path.join(dst, name))
EOF
    rm -rf "$SHARE"
    mv "$SHARE.tmp" "$SHARE"
    echo "$UNPACK_WANT" >"$SHARE/.unpacked"
fi
