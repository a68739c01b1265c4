"""A real Milvus 2.3.5 and DeltaNode's mirror of it, for the tests that run one: the collections'
schemas and rows (every type Milvus 2.3.5 loads), ``Mirror`` (``spark-submit.sh standalone`` in mirror
mode, as a user runs it), ``RecordingClient`` (the rows a test sent), and how a mirrored collection's
rows are read: its current rows, to compare with Milvus's ``query``, and every row of its insert
table, to compare with the rows sent; both as multisets (tests/row_multisets.py)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import open_table, read_table
from deltanode.standalone.services import free_port
from deltanode.state import meta
from deltanode.state.current_state import current_rows
from deltanode.wire.positions import now_ts

from ..row_multisets import assert_same_rows
from .admin_in_process import admin_in_process
from .milvus_client import MilvusClient
from .milvus_server import MilvusServer
from .processes import start as start_process
from .processes import stop as stop_process
from .support import wait_until

ROOT = Path(__file__).resolve().parents[2]

SCALARS = [("flag", "Bool"), ("i8", "Int8"), ("i16", "Int16"), ("i32", "Int32"), ("i64", "Int64"),
           ("f32", "Float"), ("f64", "Double")]


# Every type Milvus 2.3.5 takes in a collection it can load, over three collections: it takes one
# vector field a collection, and its QueryNode panics on a loaded Float16Vector (that one is not
# loaded, and is compared with what was sent).
EVERY_TYPE = [
    {"name": "id", "data_type": "Int64", "is_primary_key": True},
    *({"name": n, "data_type": t} for n, t in SCALARS),
    {"name": "title", "data_type": "VarChar", "max_length": 64},
    {"name": "doc", "data_type": "JSON"},
    *({"name": f"a_{n}", "data_type": "Array", "element_type": t, "max_capacity": 8} for n, t in SCALARS),
    {"name": "a_str", "data_type": "Array", "element_type": "VarChar", "max_capacity": 8, "max_length": 16},
    {"name": "vec", "data_type": "FloatVector", "dim": 8},
]


BINARY = [{"name": "id", "data_type": "Int64", "is_primary_key": True},
          {"name": "bits", "data_type": "BinaryVector", "dim": 16}]


BY_KEY = [{"name": "key", "data_type": "VarChar", "max_length": 32, "is_primary_key": True},
          {"name": "tenant", "data_type": "Int64", "is_partition_key": True},
          {"name": "vec", "data_type": "FloatVector", "dim": 4}]


SHARDED = [{"name": "id", "data_type": "Int64", "is_primary_key": True},
           {"name": "note", "data_type": "VarChar", "max_length": 32},
           {"name": "vec", "data_type": "FloatVector", "dim": 4}]


def every_type_row(i: int, version: int = 0) -> dict:
    """Row ``i`` of the every-type collection; ``version`` changes its values (upserts)."""
    v = i + 1000 * version
    r = np.random.default_rng(v)
    return {
        "id": i, "flag": v % 2 == 0, "i8": v % 100 - 50, "i16": v % 30000, "i32": v * 7 % 100000, "i64": v * 10**9,
        "f32": float(np.float32(v / 3)), "f64": v / 7, "title": f"title {v}", "doc": {"n": v, "tags": ["a", str(v)]},
        "a_flag": [bool(x) for x in r.integers(0, 2, v % 4)], "a_i8": r.integers(-100, 100, v % 5).tolist(),
        "a_i16": r.integers(-1000, 1000, 3).tolist(), "a_i32": r.integers(0, 10**6, v % 8).tolist(),
        "a_i64": [v, -v], "a_f32": [float(x) for x in r.random(2, dtype=np.float32)], "a_f64": r.random(3).tolist(),
        "a_str": [f"s{v}", ""][: v % 3], "vec": [float(x) for x in r.random(8, dtype=np.float32)],
        "color": ["red", "green", "blue"][v % 3], "score": v % 10,   # the dynamic field
    }


def by_key_row(i: int, version: int = 0) -> dict:
    return {"key": f"k{i:05d}", "tenant": (i * 7 + version) % 5, "vec": [float(i % 9 + version), 1.0, 2.0, 3.0]}


def sharded_row(i: int, version: int = 0) -> dict:
    return {"id": i, "note": f"note {i} v{version}", "vec": [float(i), float(version), 0.5, 0.25]}


def binary_row(i: int, version: int = 0) -> dict:
    return {"id": i, "bits": base64.b64encode(np.random.default_rng(i + 1000 * version).bytes(2)).decode()}


def as_milvus(row: dict, fields: list[dict]) -> dict:
    """A DeltaNode row as Milvus's query returns it: dynamic keys at the top, JSON parsed,
    binary vectors in base64 (as MilvusClient gives them), system columns left out."""
    out = {}
    for f in fields:
        value = row[f["name"]]
        if f["data_type"] == "JSON":
            value = json.loads(value)
        elif f["data_type"] in ("BinaryVector", "Float16Vector"):
            value = base64.b64encode(value).decode()
        out[f["name"]] = value
    if "$meta" in row and row["$meta"] is not None:
        for k, v in json.loads(row["$meta"]).items():
            out.setdefault(k, v)
    return out


def mirrored(storage: StorageLayout, collection_id: int, fields: list[dict], reader=None) -> list[dict]:
    """The collection's current rows as Milvus's query gives them: from the tables by Milvus's rules
    (``current_rows``: the reference for deletes and upserts, one row a key by construction), or
    every row a Delta reader reads from the insert table, deletion vectors applied (``reader``: one
    of ``delta_readers``, or ``deltanode_reader``), where a row held twice is there twice."""
    pk = next(f["name"] for f in fields if f.get("is_primary_key"))
    if reader is None:
        table = current_rows(storage, collection_id, pk)
    else:
        uri = storage.insert_log(collection_id)
        table = reader(uri, [f["name"] for f in fields] + (["$meta"] if "$meta" in read_table(
            storage, uri, include_deleted=True).column_names else []))
    rows = table.to_pylist() if table is not None else []
    return [as_milvus(r, fields) for r in rows]


def deltanode_reader(storage: StorageLayout) -> Callable:
    """DeltaNode's own reader (``read_table``, deletion vectors applied) as a reader of
    ``delta_readers``: ``reader(uri, columns)``."""
    return lambda uri, columns: read_table(storage, uri, columns)


def inserted(storage: StorageLayout, collection_id: int, fields: list[dict]) -> list[dict]:
    """Every row the collection's insert table holds, deleted ones too (each version an upsert
    inserted, rows a delete marked), as Milvus's query gives rows."""
    table = read_table(storage, storage.insert_log(collection_id), include_deleted=True)
    return [as_milvus(r, fields) for r in table.to_pylist()] if table is not None else []


def compacted(storage: StorageLayout, collection_id: int) -> bool:
    """Whether DeltaNode's compaction rewrote any of the insert table's files: a rewrite leaves out
    the rows deletion vectors delete, so those are no longer in the insert table."""
    uri = storage.insert_log(collection_id)
    table = open_table(uri, storage.delta_options(uri))
    return table is not None and any(c.get("operation") == "OPTIMIZE" for c in table.history())


def absent_from(current: list[dict], key: str) -> Callable[[dict], bool]:
    """Whether a row is not among Milvus's ``current`` rows (deleted, or replaced by an upsert)."""
    live = {r[key]: r for r in current}
    return lambda row: live.get(row[key]) != row


class RecordingClient:
    """A MilvusClient that records the rows each insert and upsert sent, by collection, in order:
    the rows the collection's insert table must hold, each once. A dropped partition's rows leave
    the record (DeltaNode removes them from the insert table). Runs in the test process, its
    writes from any thread."""

    def __init__(self, client: MilvusClient) -> None:
        self.client = client
        self._sent: dict[str, list[tuple[str | None, dict]]] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    def insert(self, name: str, rows: list[dict], partition: str | None = None,
               timeout: float | None = None) -> dict:
        return self._record(self.client.insert(name, rows, partition, timeout), name, rows, partition)

    def upsert(self, name: str, rows: list[dict], partition: str | None = None,
               timeout: float | None = None) -> dict:
        return self._record(self.client.upsert(name, rows, partition, timeout), name, rows, partition)

    def drop_partition(self, name: str, partition: str, timeout: float | None = None) -> None:
        self.client.drop_partition(name, partition, timeout)
        with self._lock:
            self._sent[name] = [(p, r) for p, r in self._sent.get(name, []) if p != partition]

    def sent(self, name: str) -> list[dict]:
        """The rows sent to ``name`` so far."""
        with self._lock:
            return [r for _, r in self._sent.get(name, [])]

    def _record(self, result: dict, name: str, rows: list[dict], partition: str | None) -> dict:
        with self._lock:
            self._sent.setdefault(name, []).extend((partition, r) for r in rows)
        return result


class Mirror:
    """``spark-submit.sh standalone`` in mirror mode against the test's Milvus, as a user runs it."""

    def __init__(self, etcd_server, milvus: MilvusServer, tmp_path: Path) -> None:
        self.storage = StorageLayout(str(tmp_path / "delta"))
        self.log = tmp_path / "mirror.log"
        # The broker Milvus writes to, as a user points conf/milvus-mirror.conf at it.
        broker = {"DELTANODE_MQ_TYPE": "pulsar", "DELTANODE_MQ_PULSAR_SERVICE_URL": milvus.broker_address} \
            if milvus.mq == "pulsar" else {"DELTANODE_MQ_KAFKA_BOOTSTRAP_SERVERS": milvus.broker_address}
        self.env = dict(os.environ, DELTANODE_ETCD_ENDPOINTS=etcd_server.endpoint,
                        DELTANODE_ETCD_ROOT=f"deltanode-{tmp_path.name}/meta",
                        DELTANODE_MILVUS_META_ROOT=milvus.meta_root, **broker,
                        DELTANODE_STORAGE_ROOT=str(self.storage.root), DELTANODE_METRICS_PORT=str(free_port()),
                        DELTANODE_EMBEDDED_DATA_DIR=str(tmp_path / "var"),
                        DELTANODE_DATANODE_TRIGGER_INTERVAL="300ms", DELTANODE_DATANODE_CHECKPOINT_INTERVAL="1s",
                        DELTANODE_STANDALONE_PROGRESS_INTERVAL="5s")
        self.proc: subprocess.Popen | None = None
        self._stops: list[tuple[int, int]] = []   # the log's bytes each stop wrote: [from, to)

    def start(self) -> None:
        self.proc = start_process("standalone", ROOT / "conf" / "milvus-mirror.conf", self.log, env=self.env)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            begun = self._log_size()
            stop_process(self.proc, sig)
            self._stops.append((begun, self._log_size()))
        self.proc = None

    def _log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def admin(self, *args: str):
        out = subprocess.run([str(ROOT / "spark-submit.sh"), "admin", *args, "--conf", "conf/milvus-mirror.conf"],
                             cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def admin_polled(self, *args: str):
        """``admin`` run by the command's own function in this process: what a wait polls."""
        rc, out = admin_in_process(self.env, "conf/milvus-mirror.conf", *args)
        assert rc == 0, out
        return out

    def wait_caught_up(self, collections: dict[str, dict], ts: int, timeout: float = 180) -> None:
        """Until every vchannel of ``collections`` (name -> Milvus's description) committed a
        checkpoint at or past ``ts``."""
        def behind() -> list[str]:
            return [v for d in collections.values() for v in d["vchannels"]
                    if (st := meta.channel_state(self.storage, d["collection_id"], v)) is None or st.checkpoint_ts < ts]
        try:
            wait_until(lambda: not behind(), timeout, "DeltaNode to reach the last write")
        except AssertionError:
            raise AssertionError(f"behind: {behind()}\n{self.log.read_text()[-4000:]}") from None

    def log_errors(self) -> list[str]:
        """The ERROR lines of every run so far, but not what a ``stop`` logged. A stop signals every
        process of the tree at once (``processes.stop``), where a user's Ctrl-C or SIGTERM reaches
        spark-submit.sh alone, which asks the driver to stop while the JVM is up: the JVM's own
        shutdown hook then stops Spark under a running cycle, and Spark's Executor logs the task
        whose Python worker the signal killed as an ERROR ("Exception in task ..."). That is the
        test's way of stopping, not the mirror's failure; what a stop leaves uncommitted is read
        again by the next run, which the tests' row counts check."""
        data, parts, at = self.log.read_bytes(), [], 0
        for begun, ended in self._stops:
            parts.append(data[at:begun])
            at = ended
        parts.append(data[at:])
        return [line for part in parts for line in part.decode(errors="replace").splitlines() if " ERROR " in line]


def mirror_a_sharded_collection(mc: MilvusClient, mirror: Mirror, name: str) -> None:
    """A two-shard collection written before ``mirror`` starts (300 rows, 3 of them deleted) and while
    it runs (100 more): its current rows in Delta are Milvus's, and its insert table holds each of
    the 400 rows sent once (the deleted ones too): none lost, none twice."""
    made = {name: mc.create_collection(name, SHARDED, shards=2)}
    sent = [sharded_row(i) for i in range(400)]
    mc.insert(name, sent[:300])
    mc.delete(name, "id in [1, 2, 3]")
    mirror.start()
    try:
        mc.insert(name, sent[300:])
        mirror.wait_caught_up(made, now_ts())
        cid = made[name]["collection_id"]
        current = mc.query(name, output_fields=["*"])
        assert [r["id"] for r in current] == [i for i in range(400) if i not in (1, 2, 3)]
        for reader in (None, deltanode_reader(mirror.storage)):
            assert_same_rows(current, mirrored(mirror.storage, cid, SHARDED, reader), key="id",
                             what=f"{name}'s current rows")
        assert_same_rows(sent, inserted(mirror.storage, cid, SHARDED), key="id", what=f"{name}'s insert table",
                         may_lack=absent_from(current, "id") if compacted(mirror.storage, cid) else None)
        assert mc.count(name) == 397 and not mirror.log_errors()
    finally:
        mirror.stop()
