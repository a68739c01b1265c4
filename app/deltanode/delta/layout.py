"""Where DeltaNode's Delta tables live under ``storage.root``.

- ``insert_log/{collection_id}``: insert binlogs; its commits also carry each vchannel's
  ChannelState (checkpoint + segment meta) and a ``txn`` per vchannel. It is the commit point.
- ``delta_log/{collection_id}``: delete binlogs, with a ``txn`` per vchannel.
- ``quarantine``: messages that could not be applied, with position and reason.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pyarrow as pa
from pyarrow import fs as pafs

from ..wire.names import check_safe
from .object_store import (
    LOCAL,
    StoreOptions,
    check_supported,
    delta_storage_options,
    filesystem,
)

if TYPE_CHECKING:   # a task's worker unpickles a StorageLayout and never loads the conf's modules
    from ..config.sections.storage import StorageSettings

QUARANTINE_SCHEMA = pa.schema([
    pa.field("vchannel", pa.string()), pa.field("pchannel", pa.string()),
    pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
    pa.field("msg_type", pa.int32()), pa.field("reason", pa.string()),
    pa.field("payload", pa.binary()), pa.field("recorded_at_ms", pa.int64()),
])
TABLE_CONFIG = {
    # Each commit's metadata holds its vchannel's state; keep the log so it is never lost
    # (docs/architecture.md: "Where the meta lives, and why").
    "delta.enableExpiredLogCleanup": "false",
}


PK_BLOOM_DIR = "_pk_bloom"


def pk_bloom_path(binlog_path: str) -> str:
    """Where the primary-key bloom filter of an insert binlog lives, relative to its table root:
    under a directory whose name starts with ``_``, which Delta readers and delta-rs's vacuum
    leave alone (it holds no table data)."""
    return f"{PK_BLOOM_DIR}/{binlog_path}.bloom"


def segment_of(path: str) -> tuple[int, int] | None:
    """(partition, segment) of an insert binlog path ``{partition}/{segment}/part-*.parquet``."""
    parts = path.split("/")
    if len(parts) == 3 and parts[0].lstrip("-").isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


class StorageLayout:
    """The tables' URIs under ``root``, and how to reach them (``options``; picklable: tasks carry it)."""

    def __init__(self, root: str, options: StoreOptions = LOCAL) -> None:
        root = root.rstrip("/")
        if "://" not in root:
            root = os.path.abspath(root)
        check_supported(root)
        self.root, self.options = root, options

    @classmethod
    def of(cls, settings: StorageSettings) -> StorageLayout:
        """The layout of a storage section (``config.Settings.storage``, a mirrored Milvus's ``storage``)."""
        return cls(settings.root, StoreOptions.of(settings.s3, fsync=settings.fsync))

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem and path of ``uri`` (a table or directory under the root)."""
        return filesystem(uri, self.options)

    def delta_options(self, uri: str) -> dict[str, str] | None:
        """delta-rs ``storage_options`` for ``uri``."""
        return delta_storage_options(uri, self.options)

    def _join(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def insert_log(self, collection_id: int) -> str:
        return self._join("insert_log", check_safe("collection", str(int(collection_id))))

    def delta_log(self, collection_id: int) -> str:
        return self._join("delta_log", check_safe("collection", str(int(collection_id))))

    def quarantine(self) -> str:
        return self._join("quarantine")

    def node_status(self) -> str:
        """Directory of the DataNodes' status documents (``datanode.status``), beside the tables."""
        return self._join("_deltanode", "status")

