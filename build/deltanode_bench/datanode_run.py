"""A DataNode (the shared pipeline, Spark local[2]) in a child process.

Child: ``python -m deltanode_bench.datanode_run SPEC_JSON``. It starts a SparkSession, warms
it up as a DataNode does (``datanode.warmup``), adds every vchannel to a started pipeline
and, every ``poll`` seconds, writes each vchannel's insert_log ``txn`` to the status file
when it moved, as JSON lines (``{"ev": ..., "t": wall clock, ...}``). It stops the pipeline
and Spark when a line arrives on stdin (or stdin closes), after writing the pipeline's last
cycle reports.

Parent: ``DataNode`` starts the child, follows its status file and samples its process
tree (``procs.TreeSampler``).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from .procs import TreeSampler

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHONPATH = os.pathsep.join([os.path.join(ROOT, "app"), os.path.join(ROOT, "build")])


def _emit(path: str, ev: str, **kw) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({"ev": ev, "t": time.time(), **kw}) + "\n")


def child(args: dict) -> int:
    status = args["status_file"]
    _emit(status, "process_started")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = PYTHONPATH + os.pathsep + os.environ.get("PYTHONPATH", "")
    from deltanode.jvm import spark_defaults
    from deltanode.mq.broker import Broker
    from deltanode.pipeline.pipeline import Pipeline, PipelineSettings
    from deltanode.pipeline.plan import Limits
    from deltanode.pipeline.warmup import warm_up
    from deltanode.storage.delta_log import DeltaLog
    from deltanode.storage.layout import StorageLayout
    from deltanode.wire.datapb import VchannelInfo
    from deltanode.wire.milvus_proto import schema_pb2
    from pyspark.sql import SparkSession

    # What spark-submit.sh gives a DataNode (jvm.spark_defaults()), then the bench's own settings.
    spark = SparkSession.builder.appName("deltanode-bench").config(map={
        **spark_defaults(), "spark.master": args.get("master", "local[2]"), "spark.ui.enabled": "false",
        **args.get("spark_conf", {})}).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _emit(status, "spark_session")
    if args.get("warmup", True):  # as a DataNode does with datanode.warmup = true (the default)
        warm_up(spark, args["splits"])
    _emit(status, "spark_ready")

    storage = StorageLayout(args["storage_root"])
    settings = PipelineSettings(Limits(max_messages=args["max_messages"], max_bytes=args["max_bytes"],
                                       splits=args["splits"]), trigger_interval=args["trigger_s"])
    pipe = Pipeline(spark, storage, Broker(args["mq"], args["address"]), settings).start()
    for coll in args["collections"]:
        schema = schema_pb2.CollectionSchema.FromString(base64.b64decode(coll["schema_b64"]))
        for v in coll["vchannels"]:
            _emit(status, "flowgraph_start", vchannel=v)
            pipe.add(VchannelInfo(collectionID=coll["collection_id"], channelName=v), schema)
    _emit(status, "flowgraphs_started")

    stop = threading.Event()

    def wait_stdin() -> None:
        sys.stdin.readline()
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
    for report in list(pipe.cycles):
        _emit(status, "cycle", **{k: v for k, v in asdict(report).items() if k != "failed"})
    pipe.stop()
    spark.stop()
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
