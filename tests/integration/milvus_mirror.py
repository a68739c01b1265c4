"""A real Milvus 2.3.5 and DeltaNode's mirror of it, for the tests that run one: the collections'
schemas and rows (every type Milvus 2.3.5 loads), ``Mirror`` (``spark-submit.sh standalone`` in mirror
mode, as a user runs it), and how a mirrored collection's rows are read and compared with Milvus's."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np

from deltanode.standalone.services import free_port
from deltanode.storage import meta
from deltanode.storage.current_state import current_rows
from deltanode.storage.layout import StorageLayout
from deltanode.storage.tables import read_table
from deltanode.wire.positions import now_ts

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


def mirrored(storage: StorageLayout, collection_id: int, fields: list[dict], reader=None) -> dict:
    """The collection's rows as Milvus's query gives them, by primary key: from the tables by
    Milvus's rules (``current_rows``), or as a Delta reader of ``delta_readers`` reads them."""
    pk = next(f["name"] for f in fields if f.get("is_primary_key"))
    if reader is None:
        table = current_rows(storage, collection_id, pk)
    else:
        uri = storage.insert_log(collection_id)
        table = reader(uri, [f["name"] for f in fields] + (["$meta"] if "$meta" in read_table(
            storage, uri, include_deleted=True).column_names else []))
    rows = table.to_pylist() if table is not None else []
    return {r[pk]: as_milvus(r, fields) for r in rows}


def assert_same_rows(milvus_rows: list[dict], delta_rows: dict, pk: str, what: str) -> None:
    expected = {r[pk]: r for r in milvus_rows}
    missing, extra = sorted(expected.keys() - delta_rows.keys()), sorted(delta_rows.keys() - expected.keys())
    assert not missing and not extra, f"{what}: missing in Delta {missing[:10]}, not in Milvus {extra[:10]}"
    differ = [k for k in expected if expected[k] != delta_rows[k]]
    assert not differ, (f"{what}: {len(differ)} rows differ, e.g. {differ[0]!r}:\n Milvus {expected[differ[0]]}\n"
                        f" Delta  {delta_rows[differ[0]]}")


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

    def start(self) -> None:
        self.proc = start_process("standalone", ROOT / "conf" / "milvus-mirror.conf", self.log, env=self.env)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc, sig)
        self.proc = None

    def admin(self, *args: str):
        out = subprocess.run([str(ROOT / "spark-submit.sh"), "admin", *args, "--conf", "conf/milvus-mirror.conf"],
                             cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

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
        return [line for line in self.log.read_text().splitlines() if " ERROR " in line]


def mirror_a_sharded_collection(mc: MilvusClient, mirror: Mirror, name: str) -> None:
    """A two-shard collection written before ``mirror`` starts (300 rows, 3 of them deleted) and while
    it runs (100 more): its current rows in Delta are Milvus's, none lost, none twice."""
    made = {name: mc.create_collection(name, SHARDED, shards=2)}
    mc.insert(name, [sharded_row(i) for i in range(300)])
    mc.delete(name, "id in [1, 2, 3]")
    mirror.start()
    try:
        mc.insert(name, [sharded_row(i) for i in range(300, 400)])
        mirror.wait_caught_up(made, now_ts())
        rows = current_rows(mirror.storage, made[name]["collection_id"], "id")
        assert rows is not None
        assert sorted(rows.column("id").to_pylist()) == [i for i in range(400) if i not in (1, 2, 3)]
        assert mc.count(name) == 397 and not mirror.log_errors()
    finally:
        mirror.stop()
