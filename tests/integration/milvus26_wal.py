"""A Milvus 2.6 history written by Milvus's own Go code: the steps of a script (``open``,
``append``, ``etcd_put``, ``etcd_delete``; tests/milvus_wal/main.go says what each takes) run by
``milvus-wal-writer``, which ``build/milvus_wal.sh`` builds from tests/milvus_wal and caches outside
git. Each step done prints one JSON line; they come back as ``Written``.

The steps' headers and bodies are protojson of Milvus's own protos (messagespb headers and bodies,
msgpb requests, etcdpb/datapb/streamingpb meta): a field those protos do not have fails the run.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "build" / "milvus_wal.sh"
BUILD_TIMEOUT = 900.0   # a first build downloads Milvus's modules and compiles them: ~3 minutes here

# A Milvus timestamp (TSO): the physical milliseconds above 18 bits of logical counter.
LOGICAL_BITS = 18


def tso(physical_ms: int, logical: int = 0) -> int:
    """The hybrid timestamp Milvus's TSO hands out for ``physical_ms`` and ``logical``."""
    return (physical_ms << LOGICAL_BITS) | logical


def writer_binary() -> Path:
    """The built ``milvus-wal-writer``, built first when its sources changed (quick when cached)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if out.returncode != 0:
        raise RuntimeError(f"build/milvus_wal.sh failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass(frozen=True, kw_only=True)
class Written:
    """One step's result line. For an append: where the message landed (``id`` as the WAL marshals
    it, the form ``_lc`` carries; ``offset`` the Kafka offset or the Pulsar ``ledger:entry``) and
    the properties as written (Kafka headers, Pulsar properties).

    Runs on the driver (the test process)."""

    step: int
    op: str
    pchannel: str | None = None
    vchannel: str | None = None
    type: str | None = None
    id: str | None = None
    offset: int | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    line: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_line(cls, line: dict[str, Any]) -> Written:
        return cls(step=line["step"], op=line["op"], pchannel=line.get("pchannel"),
                   vchannel=line.get("vchannel") or None, type=line.get("type"), id=line.get("id"),
                   offset=line.get("offset"),
                   properties=dict(line.get("properties") or {}), line=line)


class WriterFailed(RuntimeError):
    """The writer stopped at a step; its stderr says which and why."""


def run_script(steps: list[dict[str, Any]], *, binary: Path | None = None, timeout: float = 180.0) -> list[Written]:
    """Run ``steps`` (one JSON object each) through the writer; one ``Written`` per step."""
    script = "".join(json.dumps(s) + "\n" for s in steps)
    out = subprocess.run([str(binary or writer_binary())], input=script, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise WriterFailed(f"milvus-wal-writer failed ({out.returncode}): {out.stderr.strip()[-4000:]}")
    written = [Written.from_line(json.loads(line)) for line in out.stdout.splitlines() if line.strip()]
    if len(written) != len(steps):
        raise WriterFailed(f"{len(steps)} steps but {len(written)} results:\n{out.stdout}\n{out.stderr[-4000:]}")
    return written


def open_step(wal: str, address: str, pchannel: str, *, term: int = 1) -> dict[str, Any]:
    """Open ``pchannel`` for writing on ``wal`` (``kafka`` or ``pulsar``) at ``address``."""
    return {"op": "open", "wal": wal, "address": address, "pchannel": pchannel, "term": term}


def append_step(pchannel: str, msg_type: str, timetick: int, *, vchannel: str | None = None,
                header: dict | None = None, body: dict | None = None, last_confirmed: str | None = None,
                txn: tuple[int, int] | None = None, cipher: bool = False,
                broadcast: tuple[list[str], int] | None = None) -> dict[str, Any]:
    """Append one message of ``msg_type`` (a messagespb.MessageType name). ``vchannel`` None: a
    message of every vchannel of the pchannel (a TimeTick). ``last_confirmed``: ``"self"``,
    ``"step:N"`` (the id step N got) or a marshaled id. ``txn``: (id, keepalive ms).
    ``broadcast``: (every vchannel of the broadcast, broadcast id)."""
    step: dict[str, Any] = {"op": "append", "pchannel": pchannel, "type": msg_type, "timetick": timetick}
    if vchannel is not None:
        step["vchannel"] = vchannel
    if header is not None:
        step["header"] = header
    if body is not None:
        step["body"] = body
    if last_confirmed is not None:
        step["last_confirmed"] = last_confirmed
    if txn is not None:
        step["txn"] = {"id": txn[0], "keepalive_ms": txn[1]}
    if cipher:
        step["cipher"] = True
    if broadcast is not None:
        step["broadcast"] = {"vchannels": broadcast[0], "id": broadcast[1]}
    return step


def etcd_put_step(endpoints: str, key: str, proto: str | None = None, value: dict | None = None, *,
                  raw: str | None = None) -> dict[str, Any]:
    """Put ``value`` (protojson of the message named ``proto``, e.g. ``milvus.proto.etcd.CollectionInfo``)
    at ``key`` as Milvus marshals it, or the string ``raw``."""
    if raw is not None:
        return {"op": "etcd_put", "endpoints": endpoints, "key": key, "raw": raw}
    return {"op": "etcd_put", "endpoints": endpoints, "key": key, "proto": proto, "value": value}
