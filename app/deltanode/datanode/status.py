"""A DataNode's own view of itself, written beside its tables for ``admin health``.

etcd says which node owns which channel; only the node knows whether its vchannels persist
and whether it can reach etcd. With each progress report a DataNode writes one small JSON
document under ``{storage.root}/_deltanode/status/``, which ``admin health`` reads even
while etcd is down. A document not rewritten for ``STALE_AFTER`` report intervals belongs to
a node that stopped or hangs.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field

from pyarrow.fs import FileSelector

from ..storage.layout import StorageLayout

STALE_AFTER = 3          # report intervals
FORGET_AFTER = 3600.0    # seconds: older documents are not shown at all
FAILING_SHOWN = 20       # failing vchannels listed per node


def process_name() -> str:
    """The document's name: one per DataNode process (its server ID changes if it re-registers)."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class NodeStatus:
    name: str
    node_id: int
    written_at: float                       # wall clock
    interval: float                         # seconds between documents
    vchannels: int
    running: int
    failing: dict[str, str] = field(default_factory=dict)   # vchannel -> last error (first FAILING_SHOWN)
    etcd_unreachable_since: float | None = None
    etcd_error: str | None = None           # the last failure of that outage
    sessions_lost: int = 0

    def stale(self, now: float) -> bool:
        return now - self.written_at > STALE_AFTER * self.interval

    def persisting(self, now: float) -> bool:
        """Fresh, and none of its vchannels failing."""
        return not self.stale(now) and self.running == self.vchannels


def write_status(storage: StorageLayout, status: NodeStatus) -> None:
    """Runs on the driver."""
    fs, base = storage.filesystem(storage.node_status())
    fs.create_dir(base, recursive=True)
    with fs.open_output_stream(f"{base}/{status.name}.json") as out:
        out.write(json.dumps(asdict(status)).encode())


def remove_status(storage: StorageLayout, name: str) -> None:
    """Runs on the driver, at a clean stop (a stopped node is not a stale one)."""
    fs, base = storage.filesystem(storage.node_status())
    try:
        fs.delete_file(f"{base}/{name}.json")
    except FileNotFoundError:
        pass


def read_statuses(storage: StorageLayout, now: float | None = None) -> list[NodeStatus]:
    """The documents written within ``FORGET_AFTER``; unreadable ones (being written) are skipped."""
    now = time.time() if now is None else now
    fs, base = storage.filesystem(storage.node_status())
    try:
        infos = fs.get_file_info(FileSelector(base))
    except FileNotFoundError:
        return []
    out = []
    for info in infos:
        if not info.path.endswith(".json"):
            continue
        try:
            with fs.open_input_stream(info.path) as f:
                status = NodeStatus(**json.loads(f.read()))
        except (OSError, ValueError, TypeError):
            continue
        if now - status.written_at <= FORGET_AFTER:
            out.append(status)
    return sorted(out, key=lambda s: (s.node_id, s.name))
