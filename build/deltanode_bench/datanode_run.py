"""A DataNode (the shared pipeline, Spark local[2]) in a child process.

Child: ``python -m deltanode_bench.datanode_run SPEC_JSON``. It starts a SparkContext and, as a
DataNode does (``deltanode.datanode.spark``, ``datanode.warmup``), warms its Python workers up in the
background while it adds every vchannel to a started pipeline
and, every ``poll`` seconds, writes each vchannel's insert_log ``txn`` to the status file
when it moved, as JSON lines (``{"ev": ..., "t": wall clock, ...}``). It stops the pipeline
and Spark when a line arrives on stdin (or stdin closes), after writing the pipeline's last
cycle reports. Optional in the spec, for the delete benchmark: ``compaction_interval`` (the
compactor's; 0 runs it only on a ``compact`` line on stdin, then writes a ``compacted``
event), ``stream_cycles`` (each cycle report written as it ends, not the last 100 at the
stop), ``log_level`` (the DataNode's log level, into its log file: the ``cycle N: ...`` lines)
and ``trace_marks`` (a ``mark`` event per delete-marking job: what its tasks read and how
long they ran inside the job, which ``CycleReport`` does not keep).

Parent: ``DataNode`` starts the child, follows its status file and samples its process
tree (``procs.TreeSampler``).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace

from .procs import TreeSampler

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHONPATH = os.pathsep.join([os.path.join(ROOT, "app"), os.path.join(ROOT, "build")])


_EMITTING = threading.Lock()   # events come from the status loop, the pipeline's thread and stdin's


def _emit(path: str, ev: str, **kw) -> None:
    line = json.dumps({"ev": ev, "t": time.time(), **kw}) + "\n"
    with _EMITTING, open(path, "a") as f:
        f.write(line)


def _emit_cycle(path: str, report) -> None:
    _emit(path, "cycle", **{k: v for k, v in asdict(report).items() if k != "failed"})


def _trace_marks(status: str) -> None:
    """Wrap ``DeleteMarker.run`` (in this process only) to write a ``mark`` event per job."""
    from deltanode.pipeline.delete_mark_job import DeleteMarker
    run = DeleteMarker.run

    def traced(self, tasks, report):
        started = time.monotonic()
        results = run(self, tasks, report)
        if tasks:
            done = list(results.values())
            _emit(status, "mark", cycle=report.number, job_s=time.monotonic() - started, tasks=len(tasks),
                  candidates=sum(len(t.candidates) for t in tasks), files_read=sum(r.files_read for r in done),
                  files_skipped=sum(r.files_skipped for r in done), task_s=[r.seconds for r in done],
                  errors=[r.error for r in done if r.error])
        return results

    DeleteMarker.run = traced


def child(args: dict) -> int:
    status = args["status_file"]
    _emit(status, "process_started")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", "")
    from deltanode.config.jvm_options import spark_defaults
    from deltanode.datanode.spark import start_spark_context

    # What spark-submit.sh gives a DataNode (jvm.spark_defaults()), then the bench's own settings;
    # started, as a DataNode starts it, beside the imports below.
    started = start_spark_context({**spark_defaults(), "spark.master": args.get("master", "local[2]"),
                                   "spark.ui.enabled": "false", **args.get("spark_conf", {})}, "deltanode-bench")
    from deltanode.config.sections.pipeline import Limits, PipelineSettings, TriggerSettings
    from deltanode.delta.delta_log import DeltaLog
    from deltanode.delta.layout import StorageLayout
    from deltanode.mq.broker import Broker
    from deltanode.pipeline.pipeline import Pipeline
    from deltanode.pipeline.warmup import warm_up_in_background
    from deltanode.wire.datapb import VchannelInfo
    from deltanode.wire.milvus_proto import schema_pb2

    sc = started.result()
    sc.setLogLevel("ERROR")
    _emit(status, "spark_context")
    if args.get("warmup", True):  # as a DataNode does with datanode.warmup = true (the default)
        warm_up_in_background(sc, args["splits"], done=lambda seconds: _emit(status, "spark_ready"))
    else:
        _emit(status, "spark_ready")

    storage = StorageLayout(args["storage_root"])
    settings = PipelineSettings(limits=Limits(max_messages=args["max_messages"], max_bytes=args["max_bytes"],
                                       splits=args["splits"]), trigger=TriggerSettings(interval=args["trigger_s"]))
    if "compaction_interval" in args:
        settings = replace(settings, compaction=replace(settings.compaction, interval=args["compaction_interval"]))
    if args.get("log_level"):
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("deltanode").setLevel(args["log_level"])
    if args.get("trace_marks"):
        _trace_marks(status)
    on_cycle = (lambda report: _emit_cycle(status, report)) if args.get("stream_cycles") else None
    broker = Broker(args["mq"], args["address"], client=tuple(map(tuple, args.get("client", ()))))
    pipe = Pipeline(sc, storage, broker, settings, on_cycle=on_cycle).start()
    for coll in args["collections"]:
        schema = schema_pb2.CollectionSchema.FromString(base64.b64decode(coll["schema_b64"]))
        for v in coll["vchannels"]:
            _emit(status, "flowgraph_start", vchannel=v)
            pipe.add(VchannelInfo(collectionID=coll["collection_id"], channelName=v), schema)
    _emit(status, "flowgraphs_started")

    stop = threading.Event()

    def wait_stdin() -> None:
        while sys.stdin.readline().strip() == "compact":
            try:
                _emit(status, "compacted", **asdict(pipe.compactor.run_once(every_collection=True)))
            except Exception as e:  # noqa: BLE001 - the parent reports it
                _emit(status, "compacted", error=f"{type(e).__name__}: {e}")
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    logs: dict[int, DeltaLog] = {}
    last: dict[str, int] = {}
    rc = 0
    while not stop.wait(args.get("poll", 0.2)):
        for coll in args["collections"]:
            cid = coll["collection_id"]
            if cid not in logs:
                found = DeltaLog.open(storage.insert_log(cid))
                if found is None:
                    continue
                logs[cid] = found
            logs[cid].refresh()
            for v in coll["vchannels"]:
                off = logs[cid].txn(v) or 0
                if off != last.get(v):
                    last[v] = off
                    _emit(status, "txn", vchannel=v, offset=off)
        failed = [s for s in pipe.snapshots() if s.status == "failed"]
        if failed:
            _emit(status, "error", message=f"{failed[0].vchannel}: {failed[0].last_error}")
            rc = 1
            break
    if on_cycle is None:
        for report in list(pipe.cycles):
            _emit_cycle(status, report)
    pipe.stop()
    sc.stop()
    _emit(status, "stopped")
    return rc


@dataclass
class DataNode:
    """Parent side: the child process, its status events and its sampled process tree."""

    args: dict
    status_file: str
    log_file: str
    t_start: float = 0.0
    proc: subprocess.Popen | None = None
    sampler: TreeSampler | None = None
    events: list[dict] = field(default_factory=list)
    _pos: int = 0

    def start(self) -> DataNode:
        open(self.status_file, "w").close()
        env = dict(os.environ, PYTHONPATH=PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.t_start = time.time()
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "deltanode_bench.datanode_run", json.dumps(self.args)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=os.path.dirname(os.path.abspath(self.status_file)),
                start_new_session=True)
        self.sampler = TreeSampler(self.proc.pid, broker_pid=self.args.get("broker_pid")).start()
        return self

    def poll(self) -> list[dict]:
        with open(self.status_file) as f:
            f.seek(self._pos)
            data = f.read()
        done = data[:data.rfind("\n") + 1]
        self._pos += len(done.encode())
        new = [json.loads(line) for line in done.splitlines() if line]
        self.events.extend(new)
        return new

    def first(self, ev: str, **match) -> dict | None:
        for e in self.events:
            if e["ev"] == ev and all(e.get(k) == v for k, v in match.items()):
                return e
        return None

    def committed(self, vchannel: str) -> int:
        offs = [e["offset"] for e in self.events if e["ev"] == "txn" and e["vchannel"] == vchannel]
        return offs[-1] if offs else 0

    def _check(self) -> None:
        err = self.first("error")
        if err is not None:
            raise RuntimeError(f"DataNode vchannel failed: {err['message']}\n(log: {self.log_file})")
        if self.proc.poll() is not None:
            with open(self.log_file, errors="replace") as f:
                tail = f.read()[-3000:]
            raise RuntimeError(f"DataNode exited with code {self.proc.returncode}; see {self.log_file}:\n{tail}")

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if self.first("flowgraphs_started"):
                return
            self._check()
            time.sleep(0.1)
        raise TimeoutError(f"DataNode did not start its pipeline within {timeout:.0f} s; see {self.log_file}")

    def wait_committed(self, targets: dict[str, int], timeout: float) -> float:
        """Wait until every vchannel's txn reached its target; returns the wall clock it was seen."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if all(self.committed(v) >= t for v, t in targets.items()):
                return time.time()
            self._check()
            time.sleep(0.1)
        raise TimeoutError(f"DataNode did not commit {targets} within {timeout:.0f} s "
                           f"(at {({v: self.committed(v) for v in targets})}); see {self.log_file}")

    def compact(self, timeout: float = 600.0) -> dict:
        """One round of the DataNode's compactor over every collection (spec ``compaction_interval``
        0); returns its ``RoundReport`` as a dict."""
        done = len([e for e in self.events if e["ev"] == "compacted"])
        self.proc.stdin.write(b"compact\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            rounds = [e for e in self.events if e["ev"] == "compacted"]
            if len(rounds) > done:
                return rounds[-1]
            self._check()
            time.sleep(0.2)
        raise TimeoutError(f"the compaction round did not end within {timeout:.0f} s; see {self.log_file}")

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"stop\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group this class started
                self.proc.wait()
        if self.sampler is not None:
            self.sampler.stop()
        self.poll()
        return self.proc.returncode


def main() -> int:
    return child(json.loads(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
