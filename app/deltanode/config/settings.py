"""The conf read into its typed sections (``config.sections``), once at start: ``Settings.of``.

``Conf`` reads and checks a conf file key by key; the packages take these frozen sections
instead, so each knows the few values it uses by name and type. This module is the one place
where the conf's keys become sections; it makes no object of a higher package (a broker, a
storage layout, a client): the package or the process that needs one makes it from its section.
Runs in the launcher (``spark-submit.sh`` checks the embedded ports before any JVM starts) and
on the driver; it needs the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .conf import Conf
from .sections.broker import BrokerSettings, PchannelSettings
from .sections.embedded import EmbeddedPort, EmbeddedSettings
from .sections.etcd import EtcdSecurity, EtcdSettings
from .sections.mirror import MirrorSettings, MirrorStart
from .sections.pipeline import CompactionSettings, Limits, PipelineSettings, SealSettings, SyncSettings, TriggerSettings
from .sections.processes import DataCoordSettings, NodeSettings
from .sections.storage import S3Settings, StorageSettings

# Pulsar's client settings: mq.pulsar.<name> keys, given to the client without the prefix.
PULSAR_CLIENT_KEYS = ("auth.plugin", "auth.params", "tls.trust.certs.file", "tls.allow.insecure",
                      "tls.validate.hostname", "receiver.queue.size", "listener.name")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every section of one conf. Runs on the driver (and in the launcher, for ``embedded``)."""

    etcd: EtcdSettings
    mirror: MirrorSettings
    pchannels: PchannelSettings
    embedded: EmbeddedSettings
    node: NodeSettings
    pipeline: PipelineSettings
    datacoord: DataCoordSettings
    timetick_interval: float           # standalone's own TimeTicks (0: none)
    broker: BrokerSettings
    storage: StorageSettings

    @classmethod
    def of(cls, conf: Conf) -> Settings:
        mirror = _mirror(conf)
        return cls(
            etcd=EtcdSettings(endpoints=conf.get("etcd.endpoints"), root=conf.get("etcd.root"),
                              session_ttl=conf.get("session.ttl"), security=_etcd_security(conf, "etcd.")),
            mirror=mirror,
            pchannels=PchannelSettings(prefix=conf.get("mq.pchannel.prefix"), count=conf.get("mq.pchannel.count")),
            embedded=embedded_settings(conf),
            node=NodeSettings(address=conf.get("datanode.address"), metrics_port=conf.get("metrics.port"),
                              metrics_address=conf.get("metrics.address"),
                              progress_interval=conf.get("standalone.progress.interval"),
                              warmup=conf.get("datanode.warmup"), watch_workers=conf.get("datanode.watch.workers")),
            pipeline=_pipeline(conf, mirror),
            datacoord=DataCoordSettings(watch_timeout=conf.get("datacoord.watch.timeout"),
                                        balance=conf.get("datacoord.channel.balance")),
            timetick_interval=conf.get("standalone.timetick.interval"),
            broker=_broker(conf),
            storage=_storage(conf, "storage.root", "storage.s3."),
        )


def embedded_settings(conf: Conf) -> EmbeddedSettings:
    """The ``embedded`` section alone: the command line checks its ports before any JVM starts."""
    broker_key = conf.broker_key
    return EmbeddedSettings(
        etcd=conf.get("embedded.etcd"), broker=conf.get("embedded.broker"),
        data_dir=Path(conf.get("embedded.data.dir")),
        etcd_port=EmbeddedPort(port=conf.hostports("etcd.endpoints")[0][1], key="etcd.endpoints",
                               source=conf.source("etcd.endpoints")),
        broker_port=EmbeddedPort(port=conf.broker_hostports()[0][1], key=broker_key, source=conf.source(broker_key)),
        broker_kind=conf.get("mq.type"), broker_heap=conf.get("embedded.broker.heap"))


def _etcd_security(conf: Conf, prefix: str) -> EtcdSecurity:
    """The ``<prefix>ssl.*`` and ``<prefix>auth.*`` keys (checked together by ``checks``)."""
    tls, auth = conf.get(prefix + "ssl.enabled"), conf.get(prefix + "auth.enabled")
    return EtcdSecurity(tls=tls,
                        ca_cert=conf.get(prefix + "ssl.tls.ca.cert") if tls else None,
                        cert=conf.get(prefix + "ssl.tls.cert") if tls else None,
                        key=conf.get(prefix + "ssl.tls.key") if tls else None,
                        server_name=conf.get(prefix + "ssl.server.name") if tls else None,
                        username=conf.get(prefix + "auth.username") if auth else None,
                        password=conf.get(prefix + "auth.password") if auth else None, keys=prefix)


def _broker(conf: Conf) -> BrokerSettings:
    if conf.get("mq.type") == "pulsar":
        client = tuple((k, str(conf.get(f"mq.pulsar.{k}"))) for k in PULSAR_CLIENT_KEYS
                       if conf.get(f"mq.pulsar.{k}") not in (None, False))   # False: the client's default
        return BrokerSettings(kind="pulsar", address=conf.get("mq.pulsar.service.url"),
                              tenant=conf.get("mq.pulsar.tenant"), namespace=conf.get("mq.pulsar.namespace"),
                              client=client)
    return BrokerSettings(kind="kafka", address=conf.get("mq.kafka.bootstrap.servers"),
                          client=tuple(conf.kafka_client_conf().items()))


def _storage(conf: Conf, root_key: str, s3_prefix: str) -> StorageSettings:
    """The root of ``root_key``, reached with the keys under ``s3_prefix``, and ``storage.fsync``."""
    s3 = S3Settings(endpoint=conf.get(s3_prefix + "endpoint"), region=conf.get(s3_prefix + "region"),
                    access_key_id=conf.get(s3_prefix + "access.key.id"),
                    secret_access_key=conf.get(s3_prefix + "secret.access.key"),
                    session_token=conf.get(s3_prefix + "session.token"), ca_file=conf.get(s3_prefix + "ca.file"))
    return StorageSettings(root=str(conf.get(root_key)), s3=s3, fsync=conf.get("storage.fsync") is not False)


def _mirror(conf: Conf) -> MirrorSettings:
    storage = None if conf.get("milvus.storage.root") is None else \
        _storage(conf, "milvus.storage.root", "milvus.storage.s3.")
    return MirrorSettings(meta_root=conf.get("milvus.meta.root"), etcd_endpoints=conf.get("milvus.etcd.endpoints"),
                          etcd_security=_etcd_security(conf, "milvus.etcd."),
                          start=MirrorStart(conf.get("milvus.start")), storage=storage,
                          import_batch=conf.get("milvus.import.batch"))


def _pipeline(conf: Conf, mirror: MirrorSettings) -> PipelineSettings:
    return PipelineSettings(
        limits=Limits(max_messages=conf.get("datanode.batch.max.messages"),
                      max_bytes=conf.get("datanode.batch.max.bytes"),
                      catchup_bytes=conf.get("datanode.catchup.max.bytes"), splits=conf.get("datanode.read.splits"),
                      cycle_seconds=conf.get("datanode.cycle.max.seconds")),
        sync=SyncSettings(max_delay=conf.get("datanode.sync.max.delay"),
                          checkpoint_interval=conf.get("datanode.checkpoint.interval"),
                          idle_rate=conf.get("datanode.checkpoint.max.rate")),
        trigger=TriggerSettings(interval=conf.get("datanode.trigger.interval"),
                                files_rate=conf.get("datanode.trigger.files.rate"),
                                max_interval=conf.get("datanode.trigger.max.interval")),
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
