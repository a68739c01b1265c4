"""The pipeline's settings (``Settings.pipeline``), apart from the pipeline so that reading the
conf loads no Spark."""

from __future__ import annotations

from dataclasses import dataclass

from ..state.compaction_plan import CompactionSettings
from ..vchannel.seal_policy import SealSettings
from .plan import Limits
from .sync_policy import SyncSettings


@dataclass(frozen=True)
class PipelineSettings:
    limits: Limits = Limits()
    sync: SyncSettings = SyncSettings()
    trigger_interval: float = 1.0
    compaction: CompactionSettings = CompactionSettings()
    seal: SealSettings = SealSettings()
