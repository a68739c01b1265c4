"""A DataNode's own view of itself, written beside its tables for ``admin health``.

etcd says which node owns which channel; only the node knows whether its vchannels persist
and whether it can reach etcd. With each progress report a DataNode writes one small JSON
document under ``{storage.root}/_deltanode/status/``, which ``admin health`` reads even
while etcd is down. A document not rewritten for ``STALE_AFTER`` report intervals belongs to
a node that stopped or hangs.

The document lives on the storage it reports on, and a full filesystem is when it matters most:
on a filesystem root it fills whole blocks (``BLOCK``, spaces after the JSON), so that the next
one, when no space is left to write it beside the last, is written over the last in place,
within the blocks it holds (on filesystems that overwrite in place: ext4, XFS, tmpfs; not on
copy-on-write ones such as btrfs and ZFS, where the node only logs that it could not).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field, replace

from pyarrow.fs import FileSelector

from ..delta.layout import StorageLayout
from ..failure.causes import out_of_space

STALE_AFTER = 3          # report intervals
FORGET_AFTER = 3600.0    # seconds: older documents are not shown at all
FAILING_SHOWN = 20       # failing vchannels listed per node
BLOCK = 4096             # a document on a filesystem fills whole blocks of this size


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
    storage_full: str | None = None         # "storage full: {where}: {reason}" while it lasts
    storage_full_since: float | None = None   # wall clock
    broker_unreachable_since: float | None = None   # wall clock: the broker does not answer the node
    broker_error: str | None = None         # the last unanswered request of that outage

    def stale(self, now: float) -> bool:
        return now - self.written_at > STALE_AFTER * self.interval

    def persisting(self, now: float) -> bool:
        """Fresh, none of its vchannels failing, no full filesystem keeping any from committing, and
        its broker answering it."""
        return not self.stale(now) and self.running == self.vchannels and self.storage_full is None \
            and self.broker_unreachable_since is None


def _document(status: NodeStatus) -> bytes:
    return json.dumps(asdict(status)).encode()


def write_status(storage: StorageLayout, status: NodeStatus) -> None:
    """Runs on the driver. On a filesystem the document replaces the last one whole (a temporary
    file renamed over it: a reader never sees half of one), or, when there is no space for that,
    is written over it in place (``_overwrite``)."""
    fs, base = storage.filesystem(storage.node_status())
    path = f"{base}/{status.name}.json"
    if fs.type_name != "local":
        fs.create_dir(base, recursive=True)
        with fs.open_output_stream(path) as out:
            out.write(_document(status))
        return
    data = _document(status)
    temporary = f"{path}.tmp"   # not a ``.json``: never read
    try:
        os.makedirs(base, exist_ok=True)
        with open(temporary, "wb") as f:
            f.write(data + b" " * (-len(data) % BLOCK))
        os.replace(temporary, path)
    except OSError as e:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        if out_of_space(e) is None or not _overwrite(path, status):
            raise


def _overwrite(path: str, status: NodeStatus) -> bool:
    """Write ``status`` over the document at ``path`` in place, padded to its size (no block is
    added, none freed); its failing vchannels left out if it does not fit with them. False when
    there is no document there, or it is too small even so."""
    try:
        f = open(path, "r+b")
    except FileNotFoundError:
        return False
    with f:
        size = os.fstat(f.fileno()).st_size
        data = _document(status)
        if len(data) > size:
            data = _document(replace(status, failing={}))
        if len(data) > size:
            return False
        f.write(data + b" " * (size - len(data)))
    return True


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
