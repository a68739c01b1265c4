"""The conf as typed sections, one per concern, made once at start (``Settings.of``).

``config.Conf`` reads and checks a conf file key by key; the components take these frozen
sections instead, so each knows the few values it uses by name and type, and the conf keys are
read in this one place (plus the broker's and the storage's own ``from_conf``, which carry
client settings and credentials that never show in a repr, and ``EmbeddedSettings.of``, which
the command line uses before any JVM starts). Making them loads no Spark: the sections of the
pipeline live in Spark-free modules (``pipeline.pipeline_settings``, ``pipeline.plan``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..delta.layout import StorageLayout
from ..delta.object_store import StoreOptions
from ..etcd.security import EtcdSecurity
from ..mq.broker import Broker
from ..pipeline.pipeline_settings import PipelineSettings
from ..pipeline.plan import Limits
from ..pipeline.sync_policy import SyncSettings
from ..state.compaction_plan import CompactionSettings
from ..vchannel.seal_policy import SealSettings
from ..wire.names import pchannel_name
from . import Conf
from .embedded_settings import EmbeddedSettings


class MirrorStart(enum.StrEnum):
    """Where a mirrored vchannel that never committed starts (``milvus.start``)."""

    CREATION = "creation"       # right after the collection's CreateCollection message
    SEGMENTS = "segments"       # import what Milvus persisted, then follow from its channel checkpoint
    CHECKPOINT = "checkpoint"   # there, else at Milvus's own channel checkpoint (the gap recorded)


@dataclass(frozen=True, kw_only=True)
class EtcdSettings:
    endpoints: str
    root: str
    session_ttl: float
    security: EtcdSecurity = EtcdSecurity()   # TLS and login (etcd.ssl.*, etcd.auth.*)


@dataclass(frozen=True, kw_only=True)
class MirrorSettings:
    """The Milvus whose collections are mirrored; ``meta_root`` None: DeltaNode's own catalog."""

    meta_root: str | None = None
    etcd_endpoints: str | None = None      # None: DeltaNode's etcd
    etcd_security: EtcdSecurity = EtcdSecurity()   # of etcd_endpoints (milvus.etcd.ssl.*, milvus.etcd.auth.*)
    start: MirrorStart = MirrorStart.CREATION
    storage: StorageLayout | None = None   # Milvus's files, read only (None: nothing can be imported)
    import_batch: int = 8                  # segments a Spark job of an import reads

    @property
    def enabled(self) -> bool:
        return self.meta_root is not None


@dataclass(frozen=True, kw_only=True)
class PchannelSettings:
    """DeltaNode's own catalog's pchannels (a mirrored Milvus's come from its meta)."""

    prefix: str
    count: int

    def names(self) -> list[str]:
        return [pchannel_name(self.prefix, i) for i in range(self.count)]


@dataclass(frozen=True, kw_only=True)
class NodeSettings:
    """A DataNode process: its session, metrics, progress reports and Spark warm-up."""

    address: str
    metrics_port: int                  # 0: no metrics server
    metrics_address: str
    progress_interval: float
    warmup: bool
    watch_workers: int                 # channel watches carried out at once (channel_watch.ChannelWatcher)


@dataclass(frozen=True, kw_only=True)
class DataCoordSettings:
    watch_timeout: float
    balance: bool


@dataclass(frozen=True, kw_only=True)
class Settings:
    etcd: EtcdSettings
    mirror: MirrorSettings
    pchannels: PchannelSettings
    embedded: EmbeddedSettings
    node: NodeSettings
    pipeline: PipelineSettings
    datacoord: DataCoordSettings
    timetick_interval: float           # standalone's own TimeTicks (0: none)
    broker: Broker
    storage: StorageLayout

    @classmethod
    def of(cls, conf: Conf) -> Settings:
        mirror = MirrorSettings(meta_root=conf.get("milvus.meta.root"),
                                etcd_endpoints=conf.get("milvus.etcd.endpoints"),
                                etcd_security=EtcdSecurity.from_conf(conf, "milvus.etcd."),
                                start=MirrorStart(conf.get("milvus.start")),
                                storage=_milvus_storage(conf), import_batch=conf.get("milvus.import.batch"))
        return cls(
            etcd=EtcdSettings(endpoints=conf.get("etcd.endpoints"), root=conf.get("etcd.root"),
                              session_ttl=conf.get("session.ttl"), security=EtcdSecurity.from_conf(conf)),
            mirror=mirror,
            pchannels=PchannelSettings(prefix=conf.get("mq.pchannel.prefix"), count=conf.get("mq.pchannel.count")),
            embedded=EmbeddedSettings.of(conf),
            node=NodeSettings(address=conf.get("datanode.address"), metrics_port=conf.get("metrics.port"),
                              metrics_address=conf.get("metrics.address"),
                              progress_interval=conf.get("standalone.progress.interval"),
                              warmup=conf.get("datanode.warmup"), watch_workers=conf.get("datanode.watch.workers")),
            pipeline=_pipeline(conf, mirror),
            datacoord=DataCoordSettings(watch_timeout=conf.get("datacoord.watch.timeout"),
                                        balance=conf.get("datacoord.channel.balance")),
            timetick_interval=conf.get("standalone.timetick.interval"),
            broker=Broker.from_conf(conf),
            storage=StorageLayout.from_conf(conf),
        )


def _milvus_storage(conf: Conf) -> StorageLayout | None:
    root = conf.get("milvus.storage.root")
    return None if root is None else StorageLayout(str(root), StoreOptions.from_conf(conf, "milvus.storage.s3."))


def _pipeline(conf: Conf, mirror: MirrorSettings) -> PipelineSettings:
    return PipelineSettings(
        limits=Limits(max_messages=conf.get("datanode.batch.max.messages"),
                      max_bytes=conf.get("datanode.batch.max.bytes"),
                      catchup_bytes=conf.get("datanode.catchup.max.bytes"), splits=conf.get("datanode.read.splits"),
                      cycle_seconds=conf.get("datanode.cycle.max.seconds")),
        sync=SyncSettings(max_delay=conf.get("datanode.sync.max.delay"),
                          checkpoint_interval=conf.get("datanode.checkpoint.interval"),
                          idle_rate=conf.get("datanode.checkpoint.max.rate")),
        trigger_interval=conf.get("datanode.trigger.interval"),
        compaction=CompactionSettings(interval=conf.get("datanode.compaction.interval"),
                                      min_files=conf.get("datanode.compaction.min.files"),
                                      target_bytes=conf.get("datanode.compaction.target.size"),
                                      retention=conf.get("datanode.compaction.retention"),
                                      orphan_retention=conf.get("datanode.compaction.orphan.retention"),
                                      deleted_ratio=conf.get("datanode.compaction.deleted.ratio")),
        # A mirrored Milvus's DataCoord seals the segments its proxies write to (SealSettings).
        seal=SealSettings(by_policies=not mirror.enabled, max_size=conf.get("datanode.segment.max.size"),
                          seal_proportion=conf.get("datanode.segment.seal.proportion"),
                          max_life=conf.get("datanode.segment.max.life"),
                          max_idle=conf.get("datanode.segment.max.idle"),
                          min_size_from_idle=conf.get("datanode.segment.min.size.from.idle")))
