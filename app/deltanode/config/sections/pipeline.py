"""The driver's sections (``datanode.*``): how much a cycle reads, when a collection is committed,
when a segment is sealed, when files are compacted. Making them loads no Spark."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How much one cycle reads (``pipeline.plan``). Runs on the driver."""

    max_messages: int = 1000          # per range
    max_bytes: int = 256 << 20        # main-lane ranges of one cycle together
    catchup_bytes: int = 64 << 20     # catch-up ranges of one cycle together
    splits: int = 2                   # tasks per cycle
    cycle_seconds: float = 0.0        # how long a cycle's job may take (``cycle_budget``; 0: no bound)
    cycle_messages: int | None = None  # all ranges of one cycle together, from ``cycle_seconds``; None: no bound


@dataclass(frozen=True, kw_only=True)
class SyncSettings:
    """When a collection's vchannels are committed (``pipeline.sync_policy``). Runs on the driver."""

    max_delay: float = 0.0
    max_bytes: int = 64 << 20
    checkpoint_interval: float = 10.0
    idle_rate: float = 20.0      # idle-checkpoint commits per second, across the node


@dataclass(frozen=True, kw_only=True)
class TriggerSettings:
    """When the pipeline's loop starts a cycle (``pipeline.trigger``). Runs on the driver."""

    interval: float = 1.0        # the shortest time between two cycles' starts
    files_rate: float = 250.0    # binlog files a second past which cycles space out; 0: back to back while busy
    max_interval: float = 10.0   # the longest the files' pace spaces them


@dataclass(frozen=True, kw_only=True)
class SealSettings:
    """When a Growing segment is sealed: Milvus DataCoord's policies (``vchannel.seal_policy``).
    Runs on the driver."""

    # False in mirror mode: Milvus's DataCoord seals the segments its proxies write to, and a
    # segment DeltaNode sealed on its own would quarantine the rows Milvus still sends it.
    by_policies: bool = True
    max_size: int = 1024 << 20            # dataCoord.segment.maxSize (1024 MB)
    seal_proportion: float = 0.12         # dataCoord.segment.sealProportion
    max_life: float = 86400.0             # dataCoord.segment.maxLife (s)
    max_idle: float = 600.0               # dataCoord.segment.maxIdleTime (s)
    min_size_from_idle: int = 16 << 20    # dataCoord.segment.minSizeFromIdleToSealed (16 MB)


@dataclass(frozen=True, kw_only=True)
class CompactionSettings:
    """When a segment's files are rewritten, and how long old files stay (``state.compaction_plan``).
    Runs on the driver."""

    interval: float = 600.0          # seconds between rounds; 0: no compaction
    min_files: int = 16              # small files a segment needs before it is rewritten
    target_bytes: int = 64 << 20     # size of the rewritten files; larger files are left alone
    retention: float = 3 * 3600.0    # seconds rewritten files stay on disk
    orphan_retention: float = 86400.0  # seconds a file no commit added stays on disk (a crash between write and commit)
    deleted_ratio: float = 0.2       # a file whose DV deletes this share of its rows is rewritten; above 1: never


@dataclass(frozen=True, kw_only=True)
class PipelineSettings:
    """The pipeline's sections together (``pipeline.Pipeline``). Runs on the driver."""

    limits: Limits = Limits()
    sync: SyncSettings = SyncSettings()
    trigger: TriggerSettings = TriggerSettings()
    compaction: CompactionSettings = CompactionSettings()
    seal: SealSettings = SealSettings()
