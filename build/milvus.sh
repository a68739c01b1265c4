#!/usr/bin/env bash
# A real Milvus 2.3.5 standalone in the foreground, for trying mirror mode (README, "Mirroring a
# Milvus"): the server the tests use (tests/integration/milvus_server.py), set up by
# build/milvus_env.sh, against an etcd and a Kafka or Pulsar broker you give (--help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash build/milvus_env.sh
exec .venv/bin/python -m tests.integration.milvus_server "$@"
