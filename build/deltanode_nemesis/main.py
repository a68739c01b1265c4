"""``build/nemesis.py``: one nemesis run, its schedule and its verdict printed; exit 1 when a row
was lost or doubled, a delete not applied, or a table unreadable."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from deltanode.etcd.client import EtcdClient
from deltanode.storage import meta
from deltanode.storage.layout import StorageLayout

from .cluster import Cluster, ClusterSettings
from .faults import FaultKind, Nemesis
from .ledger import read_back
from .traffic import Traffic
from .verdict import check_collection, spark_counts

ETCD_ROOT = "nemesis/meta"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="build/nemesis.py", description=(
        "Run a standalone and a second DataNode under Milvus-like traffic (TimeTicks every 200 ms, "
        "inserts, deletes, upserts, flushes into many collections) while a seeded schedule kills and "
        "pauses them, Apache Kafka and etcd; then heal everything and check that every row the broker "
        "holds is in Delta exactly once, deletes applied, every table readable by DuckDB and Spark."))
    p.add_argument("--seed", type=int, default=1, help="the schedule's and the traffic's seed (default 1)")
    p.add_argument("--minutes", type=float, default=2.0, help="how long faults are injected (default 2)")
    p.add_argument("--collections", type=int, default=8, help="collections of 1 or 2 shards (default 8)")
    p.add_argument("--rate", type=float, default=20.0, help="DML messages a second, about (default 20)")
    p.add_argument("--faults", default=",".join(FaultKind),
                   help=f"fault kinds to draw from, comma-separated (default all: {','.join(FaultKind)})")
    p.add_argument("--settle", type=float, default=300.0,
                   help="seconds to wait, once healed, for every vchannel to catch up (default 300)")
    p.add_argument("--workdir", type=Path, help="where the services' data, the tables and the logs go "
                                                "(default a new temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the work directory when the run passes")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark reader's check (a JVM start)")
    args = p.parse_args(argv)
    try:
        args.kinds = [FaultKind(k.strip()) for k in args.faults.split(",") if k.strip()]
    except ValueError as e:
        p.error(f"--faults: {e}; the kinds: {', '.join(FaultKind)}")
    if not args.kinds:
        p.error("--faults: name at least one kind")
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


def caught_up(storage: StorageLayout, traffic: Traffic, highs: dict[str, int]) -> list[str]:
    """The vchannels whose checkpoint is not yet past ``highs`` of their pchannel."""
    behind = []
    for c in traffic.collections:
        for p, v in zip(c.record.pchannels, c.record.vchannels):
            state = meta.channel_state(storage, c.record.collection_id, v)
            if state is None or state.checkpoint_offset < highs[p]:
                behind.append(v)
    return behind


def run(args: argparse.Namespace) -> int:
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="nemesis-"))
    say(f"seed {args.seed}, {args.minutes} min of faults from {', '.join(args.kinds)}; work directory {workdir}")
    cluster = Cluster(ClusterSettings(workdir=workdir))
    storage = StorageLayout(str(cluster.storage_root))
    cluster.start_services()
    traffic = None
    try:
        with EtcdClient(cluster.etcd_endpoint) as client:
            traffic = Traffic(client=client, etcd_root=ETCD_ROOT, bootstrap=cluster.bootstrap, prefix=cluster.prefix,
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
        if traffic.proxy.sender.flush(300) > 0:
            say("the producer could not deliver every message in 300 s: the broker read-back decides")
        backend_highs = _highs(cluster, traffic)
        say(f"healed; {traffic.tally}; waiting for every vchannel to pass {sum(backend_highs.values())} messages")
        deadline = time.monotonic() + args.settle
        while (behind := caught_up(storage, traffic, backend_highs)) and time.monotonic() < deadline:
            time.sleep(2)
        ledgers = read_back(cluster.bootstrap, traffic.pchannels, {c.record.collection_id for c in traffic.collections})
        verdicts = [check_collection(storage, c.record.collection_id, c.record.name, ledgers[c.record.collection_id])
                    for c in traffic.collections]
        spark = None if args.no_spark else spark_counts(cluster.conf, [c.record.name for c in traffic.collections])
    finally:
        if traffic is not None:
            traffic.close()
        cluster.stop()
    ok = report(args, nemesis, verdicts, behind, spark)
    if traffic.error is not None:
        say(f"the traffic stopped early: {traffic.error!r}")
        ok = False
    if ok and not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


def _highs(cluster: Cluster, traffic: Traffic) -> dict[str, int]:
    from deltanode.mq.broker import Broker, connect
    marks = connect(Broker("kafka", cluster.bootstrap)).watermarks()
    return {p: marks.high(p) for p in traffic.pchannels}


def report(args, nemesis: Nemesis, verdicts, behind: list[str], spark) -> bool:
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
        say(f"{len(behind)} vchannel(s) did not catch up in {args.settle:.0f} s, e.g. {behind[:3]}")
    total = sum(v.on_broker for v in verdicts)
    say(f"seed {args.seed}: {len(nemesis.done)} faults, {total} rows on the broker, "
        f"{sum(v.in_delta for v in verdicts)} in Delta, {sum(v.duplicated for v in verdicts)} duplicated, "
        f"{sum(v.lost for v in verdicts)} lost: {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    return run(parse(argv))


if __name__ == "__main__":
    sys.exit(main())
