"""The DataNode's flowgraphs: one Spark streaming query per owned vchannel.

This is the handler the MEP 7 channel watcher drives (``watch``/``release``). ``poll``
runs from the DataNode's main loop: it restarts a failed flowgraph with backoff (it
resumes from Delta, so a restart neither loses nor repeats rows), stops one whose
collection was dropped, and collects progress figures.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ..flowgraph.launch import discard_run_dir, start_flowgraph
from ..mq.kafka import Watermarks
from ..storage.channel_state import ChannelState
from ..storage.layout import StorageLayout
from ..wire.datapb import ChannelWatchInfo
from ..wire.names import check_safe

log = logging.getLogger(__name__)
MAX_BACKOFF = 60.0
_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Lost|Refused)): (.+)$", re.MULTILINE)
_JVM_PREFIXES = ("org.", "java.", "scala.", "py4j.", "pyspark.errors")


def summarize_error(text: str) -> str:
    """The Python exception behind a failed query ("deltanode...OwnershipLost: ..."), not the
    JVM wrapper or the query plan that Spark's message ends with."""
    found = [m for m in _PY_ERROR.finditer(text) if not m.group(1).startswith(_JVM_PREFIXES)]
    line = f"{found[-1].group(1)}: {found[-1].group(2)}" if found else text.strip().splitlines()[0]
    return line[:500]


@dataclass
class FlowgraphSettings:
    bootstrap: str
    scratch_dir: str
    trigger_interval: str = "1 second"
    max_messages: int = 200
    max_bytes: int = 256 << 20
    checkpoint_interval_ms: int = 10_000
    splits: int = 2
    handoff_dir: str | None = None
    fence: dict | None = None     # endpoints/root/node_id for OwnershipFence; None without etcd


@dataclass
class _Flowgraph:
    info: ChannelWatchInfo
    query: StreamingQuery | None
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""
    dropped: bool = False
    started: float = field(default_factory=time.monotonic)


class FlowgraphManager:
    def __init__(self, spark: SparkSession, storage: StorageLayout, node_id: int,
                 settings: FlowgraphSettings) -> None:
        self.spark, self.storage, self.node_id, self.settings = spark, storage, node_id, settings
        self._flowgraphs: dict[str, _Flowgraph] = {}
        self._lock = threading.Lock()
        self._watermarks: Watermarks | None = None

    # -- ChannelHandler --------------------------------------------------------------------
    def watch(self, info: ChannelWatchInfo) -> None:
        vchannel = check_safe("vchannel", info.vchan.channelName)
        if not info.HasField("schema") or not info.schema.fields:
            raise ValueError(f"ChannelWatchInfo for {vchannel} carries no collection schema")
        self.release(vchannel)
        query = self._start(vchannel, info)
        with self._lock:
            self._flowgraphs[vchannel] = _Flowgraph(info, query)

    def release(self, vchannel: str) -> None:
        with self._lock:
            fg = self._flowgraphs.pop(vchannel, None)
        if fg is not None and fg.query is not None:
            self._stop_query(vchannel, fg.query)

    # -- lifecycle ------------------------------------------------------------------------
    def _start(self, vchannel: str, info: ChannelWatchInfo) -> StreamingQuery:
        s = self.settings
        fence = dict(s.fence, node_id=self.node_id, vchannel=vchannel) if s.fence else None
        return start_flowgraph(self.spark, self.storage, info.vchan,
                               base64.b64encode(info.schema.SerializeToString()).decode(),
                               bootstrap=s.bootstrap, scratch_dir=s.scratch_dir,
                               trigger_interval=s.trigger_interval, max_messages=s.max_messages, max_bytes=s.max_bytes,
                               checkpoint_interval_ms=s.checkpoint_interval_ms,
                               splits=s.splits, handoff_dir=s.handoff_dir, node_id=self.node_id, fence=fence)

    @staticmethod
    def _stop_query(vchannel: str, query: StreamingQuery) -> None:
        try:
            query.stop()
        except Exception as e:  # a query that already failed may refuse to stop cleanly
            log.warning("%s: stopping its query: %s", vchannel, e)
        discard_run_dir(query)
        log.info("%s: flowgraph released", vchannel)

    def stop_all(self) -> None:
        for vchannel in list(self._flowgraphs):
            self.release(vchannel)
        if self._watermarks is not None:
            self._watermarks.close()

    def owned(self) -> list[str]:
        with self._lock:
            return sorted(self._flowgraphs)

    @staticmethod
    def _state(query: StreamingQuery) -> ChannelState | None:
        path = os.path.join(getattr(query, "deltanode_run_dir", ""), "state.json")
        try:
            with open(path) as f:
                return ChannelState.from_json(f.read())
        except (OSError, ValueError):
            return None

    def poll(self) -> None:
        """Restart failed flowgraphs (with backoff); stop those whose collection was dropped."""
        now = time.monotonic()
        for vchannel, fg in list(self._flowgraphs.items()):
            if fg.dropped:
                continue
            if fg.query is not None:
                state = self._state(fg.query)
                if state is not None and state.collection_dropped:
                    log.info("%s: collection dropped; flowgraph stopped, waiting for the release", vchannel)
                    self._stop_query(vchannel, fg.query)
                    fg.query, fg.dropped = None, True
                    continue
                if fg.query.isActive:
                    if fg.failures and now - fg.started > 60:
                        fg.failures = 0
                    continue
                error = fg.query.exception()
                fg.last_error = summarize_error(str(error)) if error is not None else "stopped"
                fg.failures += 1
                fg.retry_at = now + min(MAX_BACKOFF, 2.0 ** fg.failures)
                log.error("%s: flowgraph failed (%d in a row), restarting in %.0f s: %s", vchannel, fg.failures,
                          fg.retry_at - now, fg.last_error)
                discard_run_dir(fg.query)
                fg.query = None
            if fg.query is None and now >= fg.retry_at:
                try:
                    fg.query, fg.started = self._start(vchannel, fg.info), time.monotonic()
                except Exception as e:
                    fg.failures += 1
                    fg.retry_at = now + min(MAX_BACKOFF, 2.0 ** fg.failures)
                    fg.last_error = str(e)[:500]
                    log.error("%s: restart failed, next try in %.0f s: %s", vchannel, fg.retry_at - now, e)

    def progress(self) -> list[dict]:
        """Per vchannel: committed checkpoint, rows, batches and lag behind the broker."""
        if self._watermarks is None:
            self._watermarks = Watermarks(self.settings.bootstrap)
        out = []
        for vchannel, fg in sorted(self._flowgraphs.items()):
            state = self._state(fg.query) if fg.query is not None else None
            row = {"vchannel": vchannel, "running": bool(fg.query is not None and fg.query.isActive),
                   "failures": fg.failures, "last_error": fg.last_error, "dropped": fg.dropped}
            if state is not None:
                try:
                    high = self._watermarks.high(state.pchannel, state.partition, timeout=2.0)
                except Exception:
                    high = None
                row.update(checkpoint_offset=state.checkpoint_offset, checkpoint_ts=state.checkpoint_ts,
                           rows_committed=state.rows, batches=state.batches,
                           lag_messages=None if high is None else max(0, high - state.checkpoint_offset))
            out.append(row)
        return out
