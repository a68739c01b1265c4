"""The section of a mirrored Milvus (``milvus.*``): its meta, its etcd, its files, where to start."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .etcd import EtcdSecurity
from .storage import StorageSettings


class MirrorStart(enum.StrEnum):
    """Where a mirrored vchannel that never committed starts (``milvus.start``)."""

    CREATION = "creation"       # right after the collection's CreateCollection message
    SEGMENTS = "segments"       # import what Milvus persisted, then follow from its channel checkpoint
    CHECKPOINT = "checkpoint"   # there, else at Milvus's own channel checkpoint (the gap recorded)


@dataclass(frozen=True, kw_only=True)
class MirrorSettings:
    """The Milvus whose collections are mirrored; ``meta_root`` None: DeltaNode's own catalog. Runs on the driver."""

    meta_root: str | None = None
    etcd_endpoints: str | None = None      # None: DeltaNode's etcd
    etcd_security: EtcdSecurity = EtcdSecurity()   # of etcd_endpoints (milvus.etcd.ssl.*, milvus.etcd.auth.*)
    start: MirrorStart = MirrorStart.CREATION
    storage: StorageSettings | None = None   # Milvus's files, read only (None: nothing can be imported)
    import_batch: int = 8                  # segments a Spark job of an import reads

    @property
    def enabled(self) -> bool:
        return self.meta_root is not None
