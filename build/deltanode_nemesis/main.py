"""``build/nemesis.py``: one nemesis run, its schedule and its verdict printed; exit 1 when a row
was lost or doubled, a delete not applied, or a table unreadable."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from deltanode.delta.layout import StorageLayout
from deltanode.etcd.client import EtcdClient
from deltanode.state import meta

from .broker import RunBroker
from .cluster import Cluster, ClusterSettings
from .faults import Nemesis
from .kinds import STORAGE_FAULTS, FaultKind, MqKind, StorageMode, parse_kinds
from .ledger import highs, read_back
from .storage import make_root, tmpfs_mountable
from .traffic import Traffic
from .verdict import check_collection, spark_counts

ETCD_ROOT = "nemesis/meta"
# The tmpfs of --storage tmpfs: a 5-minute run at the default traffic leaves about 40 MB of tables,
# so a 30-minute run about 250 MB (docs/faults.md, "The nemesis"); four times that, as the tmpfs
# takes memory only for what it holds.
DISK_MB = 1024


DESCRIPTION = """\
Run a standalone and a second DataNode under Milvus-like traffic (TimeTicks every 200 ms,
inserts, deletes, upserts, flushes into many collections) while a seeded schedule breaks things:
the nodes killed and paused, the broker (Apache Kafka or Apache Pulsar) killed, paused and cut off
from the nodes, etcd killed and paused, and the storage under them failing. Then heal everything
and check that every row the broker holds is in Delta exactly once, deletes and upserts applied,
every table readable by DuckDB and Spark.

--storage says where the tables live and which storage fault the schedule may draw:
  local     a directory of the work directory; no storage fault
  tmpfs     a tmpfs of --disk-mb mounted for the run (as root); fill-disk: a file takes every
            free block for the hold, deleted at the heal
  powercut  the tests' FUSE filesystem that drops writes not fsynced; power-cut: every node's
            process tree SIGKILLed, unsynced writes dropped (some written back, at fractions drawn
            from the seed), the filesystem mounted again, the nodes started at the heal
  s3        a bucket of a moto S3 server behind the tests' fault proxy; s3-errors: for the hold,
            seeded 503s, resets, slow answers and answers lost after S3 stored a PUT (data files,
            multipart completions, commits); the checks read the bucket (DuckDB through its
            httpfs extension, Spark through S3A)
The default is tmpfs where a tmpfs can be mounted, else local (said at the start)."""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="build/nemesis.py", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1, help="the schedule's and the traffic's seed (default 1)")
    p.add_argument("--minutes", type=float, default=2.0, help="how long faults are injected (default 2)")
    p.add_argument("--collections", type=int, default=8, help="collections of 1 or 2 shards (default 8)")
    p.add_argument("--rate", type=float, default=20.0, help="DML messages a second, about (default 20)")
    p.add_argument("--storage", choices=list(StorageMode),
                   help="where the storage root lives and its fault (above; default tmpfs if it mounts, else local)")
    p.add_argument("--disk-mb", type=int, default=DISK_MB,
                   help=f"size of the tmpfs of --storage tmpfs (default {DISK_MB})")
    p.add_argument("--mq", choices=list(MqKind), default=MqKind.KAFKA,
                   help="the broker: Apache Kafka or Apache Pulsar, started here with a bounded heap (default kafka)")
    p.add_argument("--faults", default="",
                   help="fault kinds to draw from, comma-separated (default every kind the storage mode allows: "
                        f"{', '.join(k for k in FaultKind if k not in STORAGE_FAULTS)}, and the mode's own: "
                        + ", ".join(f"{k} with {m}" for k, m in STORAGE_FAULTS.items()) + ")")
    p.add_argument("--settle", type=float, default=300.0,
                   help="once healed, the vchannels get as long as they take to catch up while some "
                        "checkpoint moves; the run fails when none moved for this many seconds (default 300)")
    p.add_argument("--workdir", type=Path, help="where the services' data, the tables and the logs go "
                                                "(default a new temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the work directory when the run passes (a tmpfs's "
                                                       "tables copied to delta-kept, the bucket's to s3-kept)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark reader's check (a JVM start)")
    args = p.parse_args(argv)
    args.storage_note = ""
    if args.storage is None:
        refused = tmpfs_mountable(Path(tempfile.gettempdir()) / f"nemesis-probe-{os.getpid()}")
        args.storage = StorageMode.LOCAL if refused else StorageMode.TMPFS
        args.storage_note = f" (no tmpfs can be mounted here: {refused})" if refused else ""
    args.storage, args.mq = StorageMode(args.storage), MqKind(args.mq)
    try:
        args.kinds = parse_kinds(args.faults, args.storage)
    except ValueError as e:
        p.error(f"--faults: {e}")
    return args


_STARTED = time.monotonic()


def say(line: str) -> None:
    print(f"nemesis [{time.monotonic() - _STARTED:6.0f} s]: {line}", flush=True)


def _up(log: str) -> bool:
    return "standalone up" in log or ("DataNode" in log and " up: watching" in log)


def wait_for_nodes(cluster: Cluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    logs = [cluster.settings.workdir / "logs" / f"{n.name}.log" for n in cluster.nodes]
    while not all(p.exists() and _up(p.read_text()) for p in logs):
        for n in cluster.nodes:
            if not n.alive:
                raise SystemExit(f"nemesis: {n.name} exited at start; see {cluster.settings.workdir / 'logs'}")
        if time.monotonic() > deadline:
            raise SystemExit(f"nemesis: the nodes did not come up in {timeout:.0f} s; see the logs")
        time.sleep(1)


def checkpoints(storage: StorageLayout, traffic: Traffic) -> dict[str, int]:
    """Each vchannel's checkpoint offset (-1 before its first commit)."""
    out = {}
    for c in traffic.collections:
        for v in c.record.vchannels:
            state = meta.channel_state(storage, c.record.collection_id, v)
            out[v] = -1 if state is None else state.checkpoint_offset
    return out


def settle(storage: StorageLayout, traffic: Traffic, highs: dict[str, int], quiet_for: float) -> list[str]:
    """Wait until every vchannel's checkpoint reached ``highs`` of its pchannel, for as long as
    some checkpoint moves: a backlog the faults left may take minutes to commit (on the tests' S3,
    one request at a time). The vchannels still behind once none moved for ``quiet_for`` s."""
    pchannel = {v: p for c in traffic.collections for p, v in zip(c.record.pchannels, c.record.vchannels)}
    last: dict[str, int] = {}
    moved_at = time.monotonic()
    while True:
        now = checkpoints(storage, traffic)
        behind = [v for v, offset in now.items() if offset < highs[pchannel[v]]]
        if not behind:
            return []
        if now != last:
            last, moved_at = now, time.monotonic()
        elif time.monotonic() - moved_at > quiet_for:
            return behind
        time.sleep(2)


def run(args: argparse.Namespace) -> int:
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="nemesis-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"seed {args.seed}, {args.minutes} min of faults from {', '.join(args.kinds)}; storage {args.storage}"
        f"{args.storage_note}, broker {args.mq}; work directory {workdir}")
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    storage_root = make_root(args.storage, workdir, disk_mb=args.disk_mb)
    run_broker = RunBroker(args.mq, workdir / args.mq, relayed=FaultKind.PARTITION_BROKER in args.kinds)
    cluster = Cluster(ClusterSettings(workdir=workdir), run_broker, storage_root)
    storage = storage_root.layout()
    traffic = None
    nemesis: Nemesis | None = None
    ok = False
    try:
        cluster.start_services()
        with EtcdClient(cluster.etcd_endpoint) as client:
            traffic = Traffic(client=client, etcd_root=ETCD_ROOT, broker=run_broker.direct,
                              producer=run_broker.producer, prefix=cluster.prefix,
                              pchannels=cluster.settings.pchannels, collections=args.collections, seed=args.seed)
        cluster.start_nodes()
        wait_for_nodes(cluster, 180)
        traffic.start(args.rate)
        say("traffic started; faults begin in 10 s")
        time.sleep(10)
        nemesis = Nemesis(cluster, args.kinds, args.seed)
        nemesis.run(args.minutes * 60, say)
        cluster.heal()
        traffic.stop_dml()
        if _undelivered(traffic):
            say("the producer could not deliver every message: the broker read-back decides")
        backend_highs = highs(run_broker.direct, traffic.pchannels)
        say(f"healed; {traffic.tally}; waiting for every vchannel to reach the end of its pchannel")
        healed_at = time.monotonic()
        behind = settle(storage, traffic, backend_highs, args.settle)
        if not behind:
            say(f"every vchannel caught up {time.monotonic() - healed_at:.0f} s after the heal")
        ledgers = read_back(run_broker.direct, traffic.pchannels,
                            {c.record.collection_id for c in traffic.collections})
        verdicts = [check_collection(storage, c.record.collection_id, c.record.name, ledgers[c.record.collection_id],
                                     storage_root.prepare_duckdb) for c in traffic.collections]
        spark = None if args.no_spark else spark_counts(cluster.conf, [c.record.name for c in traffic.collections])
        say(storage_root.summary())
        say("the nodes' logs: " + ", ".join(f"{what} x{n}" for what, n in told(workdir / "logs").items()))
        ok = report(args, nemesis, verdicts, behind, spark, storage_root.injected())
    finally:
        if traffic is not None:
            traffic.close()
        cluster.stop()
        storage_root.stop(keep=args.keep or not ok)
    if traffic is not None and traffic.error is not None:
        say(f"the traffic stopped early: {traffic.error!r}")
        ok = False
    if ok and not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


# What the nodes tell when a fault reaches them, one ERROR or WARNING line each time.
TOLD = {"storage full": " ERROR   deltanode.pipeline.space_watch: storage full",
        "space again": "storage has space again",
        "broker unreachable": " ERROR   deltanode.mq.reachability: broker unreachable",
        "broker back": "broker reachable again",
        "commit in doubt": "CommitInDoubt"}


def told(logs: Path) -> dict[str, int]:
    """How many lines of the nodes' logs tell each of ``TOLD``."""
    counts = dict.fromkeys(TOLD, 0)
    for log in logs.glob("*.log"):
        with open(log, errors="replace") as f:
            for line in f:
                for what, text in TOLD.items():
                    counts[what] += text in line
    return counts


def _undelivered(traffic: Traffic) -> bool:
    """Whether the producer could not deliver (Kafka: still queued after 300 s; Pulsar: failed)."""
    try:
        return traffic.proxy.sender.flush(300) > 0
    except Exception as e:  # noqa: BLE001 - Pulsar's flush raises what its last send met
        say(f"the producer's flush: {e}")
        return True


def report(args, nemesis: Nemesis, verdicts, behind: list[str], spark, storage_faults: int) -> bool:
    kinds: dict[str, int] = {}
    for f in nemesis.done:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    say(f"faults injected ({len(nemesis.done)}): " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())))
    print(f"{'collection':<14} {'broker':>7} {'delta':>7} {'dup':>4} {'unknown':>7} {'current':>7} {'lost':>5} "
          f"{'extra':>5} {'duckdb':>7} {'spark':>7}  problems")
    ok = not behind
    for v in verdicts:
        sp = spark.get(v.name, "-") if isinstance(spark, dict) else "-"
        if isinstance(spark, dict) and sp != v.readers.get("duckdb"):
            v.problems.append(f"Spark counts {sp}")
        ok = ok and v.ok
        print(f"{v.name:<14} {v.on_broker:>7} {v.in_delta:>7} {v.duplicated:>4} {v.unknown:>7} {v.current:>7} "
              f"{v.lost:>5} {v.extra_current:>5} {v.readers.get('duckdb', '-'):>7} {sp:>7}  {'; '.join(v.problems)}")
    if isinstance(spark, str):
        ok = False
        say(f"Spark could not read the tables: {spark}")
    if behind:
        say(f"{len(behind)} vchannel(s) did not catch up: no checkpoint moved for {args.settle:.0f} s, "
            f"e.g. {behind[:3]}")
    drawn = [f for f in nemesis.done if f.kind in STORAGE_FAULTS]
    if drawn and not storage_faults:
        ok = False
        say(f"{len(drawn)} storage fault(s) drawn, none took effect")
    total = sum(v.on_broker for v in verdicts)
    say(f"seed {args.seed}, {args.storage}, {args.mq}: {len(nemesis.done)} faults, {total} rows on the broker, "
        f"{sum(v.in_delta for v in verdicts)} in Delta, {sum(v.duplicated for v in verdicts)} duplicated, "
        f"{sum(v.lost for v in verdicts)} lost: {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    return run(parse(argv))


if __name__ == "__main__":
    sys.exit(main())
