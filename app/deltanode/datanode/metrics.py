"""A DataNode's Prometheus metrics and health, served over HTTP by the driver.

``GET /metrics`` is the Prometheus text format. ``GET /healthz`` (liveness) answers 200 while
nothing inside the process is wrong (its pipeline loop runs, it holds an etcd session, none of its
vchannels is failing) and 503 otherwise; ``GET /readyz`` answers 200 only while the node persists,
503 also while an outage outside it (a full filesystem, the broker or object store away) keeps its vchannels
waiting. Both bodies are the same JSON document saying why. An outside outage keeps ``/healthz``
at 200 because a restart cannot end it; an etcd outage alone keeps both at 200: the node goes on
committing (docs/operations.md, "When etcd is away"), and the body and
``deltanode_etcd_reachable`` say so.

Two kinds of figures, so that nothing is counted twice and nothing is kept per scrape:

- read at scrape time from the pipeline's snapshots (``DataNodeCollector``): per vchannel, what
  it consumed on this node (counters that only grow, re-reads after a failure included), what
  its committed ChannelState holds (durable totals, carried across nodes and restarts), its
  checkpoint lag in seconds and in messages, its state; per node, its channels, session, etcd
  reachability and whether a full filesystem stops its commits;
- observed once per cycle (``CycleMetrics``, the pipeline's ``on_cycle``): cycle and Delta
  commit durations, and per vchannel the commit lag (insert -> durable within a TimeTick).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..failure.kinds import ACTIONS, Action
from ..pipeline.cycle_report import CycleReport
from ..vchannel.flowgraph import FlowgraphStatus, Snapshot
from ..wire.positions import physical_ms

log = logging.getLogger(__name__)
FAILING_LISTED = 20                       # failing vchannels named in a /healthz body
CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)
LAG_BUCKETS = (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class NodeView:
    """What the metrics read of a DataNode, as callables evaluated at scrape time (runs on the driver)."""

    node_id: Callable[[], int]                       # 0 while it holds no session
    snapshots: Callable[[], list[Snapshot]]
    high_watermark: Callable[[str], int | None]      # pchannel -> its last seen high watermark
    pipeline_alive: Callable[[], bool]
    etcd_down_since: Callable[[], float | None]      # wall clock, None while etcd answers
    etcd_error: Callable[[], str]
    sessions_lost: Callable[[], int]
    storage_full: Callable[[], str | None] = lambda: None   # "storage full: {where}: {reason}" while it lasts
    broker_down_since: Callable[[], float | None] = lambda: None   # wall clock, None while the broker answers
    broker_error: Callable[[], str] = lambda: ""
    store_down_since: Callable[[], float | None] = lambda: None   # the object store's outage, wall clock
    store_error: Callable[[], str] = lambda: ""


class DataNodeCollector(Collector):
    """Figures read from the node at scrape time (runs on the driver, in the HTTP server's thread)."""

    def __init__(self, view: NodeView) -> None:
        self.view = view

    def collect(self) -> Iterable[Metric]:
        snaps = self.view.snapshots()
        now = time.time()
        yield from self._vchannels(snaps, now)
        yield from self._node(snaps, now)

    def _vchannels(self, snaps: list[Snapshot], now: float) -> Iterable[Metric]:
        """A series per vchannel of each family: what it read, what it committed, its lag and health."""
        v = self.view
        labels = ["vchannel", "collection"]

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(f"deltanode_vchannel_{name}", doc, labels=labels)

        consumed = {k: counter(f"consumed_{k}", f"{doc} read on this node since the vchannel was added "
                                                f"(re-reads after a failure included)")
                    for k, doc in (("rows", "Inserted rows"), ("deletes", "Deleted primary keys"),
                                   ("messages", "Insert and Delete messages"), ("bytes", "Their wire bytes"),
                                   ("quarantined", "Messages quarantined as bad input"))}
        committed = {k: counter(f"committed_{k}", f"{doc} in the vchannel's committed checkpoint (durable "
                                                  f"totals, over every node that served it)")
                     for k, doc in (("rows", "Inserted rows"), ("messages", "Insert and Delete messages"),
                                    ("bytes", "Their wire bytes"))}
        lag_s = GaugeMetricFamily("deltanode_vchannel_checkpoint_lag_seconds",
                                  "Now minus the TimeTick of the committed checkpoint; 0 while the committed "
                                  "checkpoint is at its pchannel's high watermark", labels=labels)
        lag_m = GaugeMetricFamily("deltanode_vchannel_checkpoint_lag_messages",
                                  "The pchannel's high watermark minus the committed checkpoint offset",
                                  labels=labels)
        up = GaugeMetricFamily("deltanode_vchannel_up", "1 while the vchannel's flowgraph runs, 0 while it "
                                                        "waits to restart after a failure", labels=labels)
        failures = GaugeMetricFamily("deltanode_vchannel_failures", "Failures in a row", labels=labels)
        for s in snaps:
            key = [s.vchannel, str(s.collection_id)]
            c = s.consumed
            for name, value in (("rows", c.rows), ("deletes", c.deletes), ("messages", c.dml_messages),
                                ("bytes", c.dml_bytes), ("quarantined", c.quarantined)):
                consumed[name].add_metric(key, value)
            for name, value in (("rows", s.rows_committed), ("messages", s.committed_dml_messages),
                                ("bytes", s.committed_dml_bytes)):
                committed[name].add_metric(key, value)
            high = v.high_watermark(s.pchannel)
            behind = None if s.checkpoint_offset is None or high is None else max(0, high - s.checkpoint_offset)
            if s.checkpoint_ts:
                # Nothing written to the pchannel is past a checkpoint at its head, however old its
                # TimeTick: a Milvus 2.6 pchannel at rest gets no TimeTick (docs/milvus-facts.md §14).
                lag_s.add_metric(key, 0.0 if behind == 0 else max(0.0, now - physical_ms(s.checkpoint_ts) / 1000))
            if behind is not None:
                lag_m.add_metric(key, behind)
            up.add_metric(key, 1 if s.status != FlowgraphStatus.FAILED else 0)
            failures.add_metric(key, s.failures)
        yield from consumed.values()
        yield from committed.values()
        yield from (lag_s, lag_m, up, failures)

    def _node(self, snaps: list[Snapshot], now: float) -> Iterable[Metric]:
        """The node's own gauges: its vchannels, session, pipeline and etcd."""
        v = self.view
        node_id = v.node_id()
        yield _gauge("deltanode_node_vchannels", "Vchannels this DataNode serves", len(snaps))
        yield _gauge("deltanode_node_vchannels_running", "Of them, running",
                     sum(s.status == FlowgraphStatus.RUNNING for s in snaps))
        yield _gauge("deltanode_node_session_up", "1 while the DataNode holds an etcd session", 1 if node_id else 0)
        yield _gauge("deltanode_node_id", "The DataNode's server ID (0 without a session)", node_id)
        yield _gauge("deltanode_node_pipeline_up", "1 while the shared pipeline's loop runs",
                     1 if v.pipeline_alive() else 0)
        down = v.etcd_down_since()
        yield _gauge("deltanode_etcd_reachable", "1 while etcd answers the node", 0 if down else 1)
        yield _gauge("deltanode_etcd_unreachable_seconds", "How long etcd has not answered (0 while it does)",
                     now - down if down else 0.0)
        lost = CounterMetricFamily("deltanode_node_sessions_lost", "etcd sessions this process lost and replaced")
        lost.add_metric([], v.sessions_lost())
        yield lost
        yield _gauge("deltanode_storage_full", "1 while a full filesystem (the storage root or Spark's local "
                     "directory) keeps vchannels from committing", 1 if v.storage_full() else 0)
        broker_down = v.broker_down_since()
        yield _gauge("deltanode_broker_reachable", "1 while the broker answers the node's pipeline",
                     0 if broker_down else 1)
        yield _gauge("deltanode_broker_unreachable_seconds", "How long the broker has not answered (0 while it does)",
                     now - broker_down if broker_down else 0.0)
        store_down = v.store_down_since()
        yield _gauge("deltanode_object_store_reachable", "1 while the object store of storage.root answers (always 1 "
                     "on a filesystem)", 0 if store_down else 1)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


class CycleMetrics:
    """Figures observed once per cycle: ``observe`` is the pipeline's ``on_cycle`` (its loop thread)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.cycles = Counter("deltanode_cycles", "Pipeline cycles run", registry=registry)
        self.seconds = Histogram("deltanode_cycle_seconds", "A cycle's duration: plan, Spark job, commits",
                                 buckets=CYCLE_BUCKETS, registry=registry)
        self.job = Histogram("deltanode_cycle_job_seconds", "The cycle's Spark job (read, route, write binlogs)",
                             buckets=CYCLE_BUCKETS, registry=registry)
        self.messages = Counter("deltanode_read_messages", "Messages read from the pchannels", registry=registry)
        self.bytes = Counter("deltanode_read_bytes", "Bytes read from the pchannels", registry=registry)
        self.commits = Histogram("deltanode_delta_commit_seconds", "One Delta commit (a collection's vchannels)",
                                 buckets=CYCLE_BUCKETS, registry=registry)
        self.lag = Histogram("deltanode_vchannel_commit_lag_seconds",
                             "At each commit with rows: its wall clock minus the new checkpoint's TimeTick "
                             "(insert -> durable for the last rows, within a tick)",
                             ["vchannel"], buckets=LAG_BUCKETS, registry=registry)
        self._lag_labels: set[str] = set()

    def observe(self, report: CycleReport) -> None:
        self.cycles.inc()
        self.seconds.observe(report.seconds)
        if report.tasks:
            self.job.observe(report.job_s)
        self.messages.inc(report.messages)
        self.bytes.inc(report.bytes)
        for seconds in report.commit_seconds:
            self.commits.observe(seconds)
        for vchannel, seconds in report.commit_lag:
            self.lag.labels(vchannel).observe(max(0.0, seconds))
            self._lag_labels.add(vchannel)

    def forget(self, current: set[str]) -> None:
        """Drop the series of vchannels this node no longer serves."""
        for vchannel in self._lag_labels - current:
            self.lag.remove(vchannel)
        self._lag_labels &= current


_OUTSIDE = tuple(f"{kind}:" for kind, action in ACTIONS.items() if action is Action.BACK_OFF)


def _waits_outside(snap: Snapshot) -> bool:
    """Failed for a cause outside the process (``Failure.outside``): it waits, it is not failing."""
    return snap.last_error.startswith(_OUTSIDE)


def health(view: NodeView) -> tuple[bool, dict]:
    """Whether the node is sound (``/healthz``, a liveness probe), and the body of both probes.

    Only what is wrong inside the process fails it: the pipeline loop stopped, no etcd session,
    a vchannel failing. An outage of something outside (etcd, the broker, a full filesystem)
    keeps it sound: the node waits where it stands and goes on by itself when the outage ends, so
    a restart cannot help and would only re-read what it had not committed. Those outages are in
    ``outages`` and fail ``readiness`` instead."""
    snaps = view.snapshots()
    failing = {s.vchannel: s.last_error for s in snaps
               if s.status == FlowgraphStatus.FAILED and not _waits_outside(s)}
    problems = []
    if not view.pipeline_alive():
        problems.append("the pipeline loop stopped")
    if not view.node_id():
        problems.append("no etcd session (registering)")
    if failing:
        problems.append(f"{len(failing)} vchannel(s) failing")
    full = view.storage_full()
    down = view.etcd_down_since()
    broker_down = view.broker_down_since()
    broker = "reachable" if broker_down is None else \
        f"unreachable for {time.time() - broker_down:.0f} s: {view.broker_error()}"
    store_down = view.store_down_since()
    store = "reachable" if store_down is None else \
        f"unreachable for {time.time() - store_down:.0f} s: {view.store_error()}"
    # etcd away alone does not stop commits (docs/operations.md, "When etcd is away"): not an outage here.
    outages = [o for o in (full, None if broker_down is None else f"broker {broker}",
                           None if store_down is None else f"object storage {store}") if o]
    body = {"status": "ok" if not problems else "unhealthy", "problems": problems, "outages": outages,
            "persisting": not problems and not outages, "node_id": view.node_id(),
            "vchannels": len(snaps), "running": sum(s.status == FlowgraphStatus.RUNNING for s in snaps),
            "failing": dict(sorted(failing.items())[:FAILING_LISTED]),
            "waiting_outside": sum(s.status == FlowgraphStatus.FAILED and _waits_outside(s) for s in snaps),
            "etcd": "reachable" if down is None else
                    f"unreachable for {time.time() - down:.0f} s: {view.etcd_error()}",
            "storage_full": full, "broker": broker, "object_storage": store}
    return not problems, body


def readiness(view: NodeView) -> tuple[bool, dict]:
    """Whether the node persists now (``/readyz``): sound, and no outage outside it keeps its
    vchannels from committing (a full filesystem, the broker or the object store away). Same body
    as ``health``."""
    _, body = health(view)
    return body["persisting"], body


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:   # `format`: the base class's name
        """Scrapes are not logged."""


class MetricsServer:
    """``/metrics`` and ``/healthz`` on ``address:port`` (runs on the driver, a daemon thread)."""

    def __init__(self, view: NodeView, address: str, port: int) -> None:
        self.view = view
        self.registry = CollectorRegistry()
        self.registry.register(DataNodeCollector(view))
        self.cycle = CycleMetrics(self.registry)
        metrics_app = make_wsgi_app(self.registry)

        def app(environ, start_response):
            path = environ.get("PATH_INFO", "")
            if path in ("/healthz", "/readyz"):
                ok, body = (health if path == "/healthz" else readiness)(view)
                start_response("200 OK" if ok else "503 Service Unavailable",
                               [("Content-Type", "application/json")])
                return [json.dumps(body).encode()]
            if path in ("/metrics", "/"):
                return metrics_app(environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"/metrics, /healthz or /readyz\n"]

        try:
            self._server = make_server(address, port, app, _ThreadingServer, handler_class=_QuietHandler)
        except OSError as e:
            raise RuntimeError(f"metrics.port: cannot serve metrics on {address}:{port} ({e.strerror}); "
                               f"choose another port, or 0 to turn the metrics server off") from None
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="deltanode-metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics, liveness on /healthz, readiness on /readyz",
                 self._server.server_address[0], self.port)
        return self

    def on_cycle(self, report: CycleReport) -> None:
        self.cycle.observe(report)
        if report.number % 100 == 0:
            self.cycle.forget({s.vchannel for s in self.view.snapshots()})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
