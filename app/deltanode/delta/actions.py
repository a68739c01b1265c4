"""The file actions of a Delta commit, as DeltaNode writes and replays them."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .deletion_vectors import DeletionVector
from .pk_bloom import INLINE_TAG


@dataclass(frozen=True, kw_only=True)
class AddFile:
    """An ``add``: a data file (path relative to the table root) and, when some of its rows are
    deleted, its deletion vector. A logical file is its path and its DV: marking more rows
    deleted is a ``remove`` of the file with its old DV and an ``add`` of it with the new one."""

    path: str
    size: int
    stats: str                                    # Delta stats JSON ("" when none)
    deletion_vector: DeletionVector | None = None
    pk_bloom: bytes | None = None                 # its key filter, when small enough to live in the log

    @classmethod
    def of_action(cls, add: Mapping, deletion_vector: DeletionVector | None) -> AddFile:
        """From an ``add`` as the log holds it: JSON, or a checkpoint row (its tags a list of pairs)."""
        tags = dict(add.get("tags") or ())
        bloom = tags.get(INLINE_TAG)
        return cls(path=add["path"], size=int(add["size"]), stats=add.get("stats") or "",
                   deletion_vector=deletion_vector, pk_bloom=base64.b64decode(bloom) if bloom else None)

    @property
    def rows(self) -> int:
        """The file's rows (``numRecords``), deleted ones included."""
        return int(json.loads(self.stats)["numRecords"]) if self.stats else 0

    @property
    def deleted(self) -> int:
        return self.deletion_vector.cardinality if self.deletion_vector is not None else 0

    def with_deletion_vector(self, dv: DeletionVector) -> AddFile:
        """This file with ``dv``: its min/max may cover deleted rows now, so its stats say their
        bounds are not tight (as Delta's writers do; ``numRecords`` stays the file's)."""
        stats = json.dumps({**json.loads(self.stats), "tightBounds": False}) if self.stats else ""
        return replace(self, stats=stats, deletion_vector=dv)

    def removal(self) -> RemoveFile:
        """The ``remove`` of this logical file (its DV included: without it the file stays live)."""
        return RemoveFile(path=self.path, size=self.size, deletion_vector=self.deletion_vector)

    def to_action(self, now_ms: int, data_change: bool) -> dict:
        add = {"path": self.path, "partitionValues": {}, "size": self.size, "modificationTime": now_ms,
               "dataChange": data_change, "stats": self.stats}
        if self.deletion_vector is not None:
            add["deletionVector"] = self.deletion_vector.to_json()
        if self.pk_bloom is not None:
            add["tags"] = {INLINE_TAG: base64.b64encode(self.pk_bloom).decode()}
        return {"add": add}


@dataclass(frozen=True, kw_only=True)
class RemoveFile:
    path: str
    size: int
    deletion_vector: DeletionVector | None = None

    def to_action(self, now_ms: int, data_change: bool) -> dict:
        remove = {"path": self.path, "deletionTimestamp": now_ms, "dataChange": data_change,
                  "extendedFileMetadata": True, "partitionValues": {}, "size": self.size}
        if self.deletion_vector is not None:
            remove["deletionVector"] = self.deletion_vector.to_json()
        return {"remove": remove}
