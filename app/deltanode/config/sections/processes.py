"""The sections of the processes themselves: a DataNode's and the coordinator's own settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class NodeSettings:
    """A DataNode process: its session, metrics, progress reports and Spark warm-up. Runs on the driver."""

    address: str
    metrics_port: int                  # 0: no metrics server
    metrics_address: str
    progress_interval: float
    warmup: bool
    watch_workers: int                 # channel watches carried out at once (channel_watch.ChannelWatcher)


@dataclass(frozen=True, kw_only=True)
class DataCoordSettings:
    """The coordinator: how long a channel watch may wait, and whether it balances channels. Runs on the driver."""

    watch_timeout: float
    balance: bool
