"""The nemesis's checks once everything is healed and every vchannel caught up: per collection,
the insert table holds each row the broker holds once (a deleted row may be gone: compaction
drops the rows deletion vectors mark), the current state equals the model's, and the tables read
the same in DuckDB and in Spark (``spark-submit.sh sql``, as a user runs it). Runs in the
nemesis process."""

from __future__ import annotations

import collections
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.state.current_state import current_rows

from .cluster import ROOT
from .ledger import CollectionLedger


@dataclass
class CollectionVerdict:
    name: str
    on_broker: int = 0          # insert rows the broker holds
    in_delta: int = 0           # rows in the insert table (deleted ones included)
    duplicated: int = 0         # (pk, ts) in Delta more often than on the broker
    unknown: int = 0            # (pk, ts) in Delta the broker never held
    lost: int = 0               # standing rows of the model missing from Delta's current state
    extra_current: int = 0      # rows of Delta's current state the model does not have
    current: int = 0
    readers: dict[str, int] = field(default_factory=dict)   # reader -> rows it counts
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.duplicated or self.unknown or self.lost or self.extra_current or self.problems)


def compare(v: CollectionVerdict, *, broker: collections.Counter, delta: collections.Counter,
            model: collections.Counter, current: collections.Counter) -> None:
    """Fill ``v``'s counts: ``broker`` and ``delta``, the insert rows (pk, ts) with their
    multiplicities on the broker and in the insert table; ``model`` and ``current``, the standing
    rows by the model and in Delta's current state."""
    v.on_broker, v.in_delta, v.current = sum(broker.values()), sum(delta.values()), sum(current.values())
    extra = delta - broker
    v.unknown = sum(n for key, n in extra.items() if key not in broker)
    v.duplicated = sum(n for key, n in extra.items() if key in broker)
    v.lost = sum((model - current).values())
    v.extra_current = sum((current - model).values())
    if v.lost:
        v.problems.append(f"lost e.g. {sorted(model - current)[:3]}")
    if extra or v.extra_current:
        v.problems.append(f"extra e.g. {sorted(extra + (current - model))[:3]}")


def _pairs(table) -> collections.Counter:
    if table is None:
        return collections.Counter()
    return collections.Counter(zip(table.column("pk").to_pylist(), table.column("_ts").to_pylist()))


def check_collection(storage: StorageLayout, cid: int, name: str, ledger: CollectionLedger,
                     prepare_duckdb: Callable = lambda con: None) -> CollectionVerdict:
    """``prepare_duckdb(con)`` lets DuckDB's connection reach the root (an S3 secret)."""
    v = CollectionVerdict(name=name)
    model = ledger.current()
    compare(v, broker=collections.Counter(ledger.inserts),
            delta=_pairs(read_table(storage, storage.insert_log(cid), ["pk", "_ts"], include_deleted=True)),
            model=model, current=_pairs(current_rows(storage, cid, "pk")))
    _duckdb(storage, cid, v, sum(model.values()), prepare_duckdb)
    return v


def _duckdb(storage: StorageLayout, cid: int, v: CollectionVerdict, want: int, prepare: Callable) -> None:
    try:
        import duckdb

        from tests.delta_readers import duckdb_connection
    except ImportError as e:   # the [test] extras bring DuckDB
        v.problems.append(f"DuckDB not installed: {e}")
        return
    try:
        with duckdb_connection() as con:
            try:
                prepare(con)
            except Exception as e:  # noqa: BLE001 - a reader that cannot reach the root is a finding, said
                v.problems.append(f"DuckDB cannot reach {storage.root} here: {e}")
                return
            n = con.execute(f"SELECT count(*) FROM delta_scan('{storage.insert_log(cid)}')").fetchone()[0]
    except duckdb.Error as e:
        v.problems.append(f"DuckDB cannot read the table: {e}")
        return
    v.readers["duckdb"] = n
    # DuckDB applies deletion vectors but not Milvus's rules: an upsert's older row is marked by a
    # DV too, so both count the rows no delete or upsert replaced.
    if n != want:
        v.problems.append(f"DuckDB counts {n} rows, the model {want}")


def spark_counts(conf: Path, names: list[str]) -> dict[str, int] | str:
    """``SELECT count(*)`` of each collection through ``spark-submit.sh sql`` (one JVM for all), or
    the error it printed."""
    query = " UNION ALL ".join(f"SELECT '{n}' AS c, count(*) AS n FROM {n}" for n in names)
    out = subprocess.run([str(ROOT / "spark-submit.sh"), "sql", "--conf", str(conf), query], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return out.stderr[-2000:]
    return {row["c"]: row["n"] for row in map(json.loads, out.stdout.splitlines()) if row}
