"""``admin verify`` against a real Milvus 2.3.5 and DeltaNode's mirror of it (``milvus_mirror.Mirror``,
on the suite's etcd and Apache Kafka): after the mirror caught up, every collection is equal,
count, keys and every field; then rows are taken from and added to the mirror's Delta tables by
hand, through the project's own commit code (a deletion vector for a row; a row appended in a
file of its own, once as a copy, once with its vector one float32 step off), and ``verify``
names exactly those keys, and exits 1."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs

from deltanode.delta.actions import AddFile
from deltanode.delta.deletion_vectors import inline, positions
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.wire.positions import now_ts

from .milvus_client import MilvusClient
from .milvus_mirror import BINARY, BY_KEY, EVERY_TYPE, Mirror, binary_row, by_key_row, every_type_row
from .milvus_server import MilvusServer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.spark   # the mirror runs spark-submit (a Spark application of its own)

PKS = {"every_type": "id", "by_key": "key", "binary": "id"}
BY_HAND = "part-by-hand-"   # the files this test adds to a table


@pytest.fixture(scope="module")
def milvus(etcd_server, broker, tmp_path_factory):
    with MilvusServer(etcd_server.endpoint, broker.bootstrap_servers, tmp_path_factory.mktemp("milvus-verify"),
                      root_path=f"mv{os.getpid()}v") as server:
        yield server


def verify(mirror: Mirror, milvus: MilvusServer, *args: str) -> tuple[int, dict, str]:
    """``./spark-submit.sh admin verify`` as a user runs it: exit code, its JSON, its stderr."""
    out = subprocess.run([str(ROOT / "spark-submit.sh"), "admin", "verify", "--conf", "conf/milvus-mirror.conf",
                          "--milvus-uri", f"http://{milvus.uri}", *args],
                         cwd=ROOT, env=mirror.env, capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout), out.stderr


def keys_in_delta(storage: StorageLayout, collection_id: int, pk: str) -> Counter:
    """Every key of the insert table as its readers see it (deletion vectors applied), counted."""
    table = read_table(storage, storage.insert_log(collection_id), [pk])
    return Counter(table.column(pk).to_pylist() if table is not None else [])


def _row_file(storage: StorageLayout, collection_id: int, pk: str, key) -> tuple[DeltaLog, AddFile, int]:
    """The insert table's log, the live file DeltaNode wrote that holds ``key``'s row and the row's
    position in it."""
    uri = storage.insert_log(collection_id)
    log = DeltaLog(uri, options=storage.options)
    for add in log.live_files().values():
        if add.path.startswith(BY_HAND):
            continue
        hidden = set(positions(add.deletion_vector, uri, pafs.LocalFileSystem()).tolist()) \
            if add.deletion_vector is not None else set()
        for i, k in enumerate(pq.read_table(f"{uri}/{add.path}", columns=[pk]).column(pk).to_pylist()):
            if k == key and i not in hidden:
                return log, add, i
    raise AssertionError(f"no live row of {key!r} in {uri}")


def hide(storage: StorageLayout, collection_id: int, pk: str, key) -> None:
    """Delete ``key``'s row by a deletion vector, as DeltaNode marks a delete (the file's DV
    replaced by one holding the row too), with no delete recorded anywhere."""
    log, add, i = _row_file(storage, collection_id, pk, key)
    uri = storage.insert_log(collection_id)
    old = positions(add.deletion_vector, uri, pafs.LocalFileSystem()) if add.deletion_vector is not None \
        else np.array([], np.uint64)
    dv = inline(np.union1d(old, np.array([i], np.uint64)))
    log.commit(adds=[add.with_deletion_vector(dv)], removes=[add.removal()], txns={}, expected={}, info={})


def append_copy(storage: StorageLayout, collection_id: int, pk: str, key, change=None) -> None:
    """Append ``key``'s row again, in a file of its own; ``change`` edits the copy's values first."""
    log, add, i = _row_file(storage, collection_id, pk, key)
    uri = storage.insert_log(collection_id)
    source = pq.read_table(f"{uri}/{add.path}")
    row = source.slice(i, 1).to_pylist()
    if change is not None:
        change(row[0])
    name = f"{BY_HAND}{uuid.uuid4()}.parquet"
    pq.write_table(pa.Table.from_pylist(row, schema=source.schema), f"{uri}/{name}")
    log.commit(adds=[AddFile(path=name, size=os.path.getsize(f"{uri}/{name}"), stats=json.dumps({"numRecords": 1}))],
               txns={}, expected={}, info={})


def one_step_off(row: dict) -> None:
    """The row's first vector element moved to the next float32 up."""
    row["vec"][0] = float(np.nextafter(np.float32(row["vec"][0]), np.float32(np.inf)))


def test_verify_names_exactly_the_rows_taken_from_and_added_to_a_mirror(etcd_server, milvus, tmp_path):
    mirror = Mirror(etcd_server, milvus, tmp_path)
    with MilvusClient(milvus.uri, timeout=120) as mc:
        made = {"every_type": mc.create_collection("every_type", EVERY_TYPE, enable_dynamic_field=True),
                "by_key": mc.create_collection("by_key", BY_KEY, num_partitions=4),
                "binary": mc.create_collection("binary", BINARY, shards=2)}
        mc.insert("every_type", [every_type_row(i) for i in range(300)])
        mc.delete("every_type", "id in [3, 5]")
        mc.insert("by_key", [by_key_row(i) for i in range(200)])
        mc.insert("binary", [binary_row(i) for i in range(150)])
        mirror.start()
        try:
            mc.upsert("every_type", [every_type_row(i, version=1) for i in range(10, 30)])
            mc.insert("every_type", [every_type_row(i) for i in range(300, 400)])
            mc.delete("by_key", 'key in ["k00001", "k00002"]')
            mc.upsert("binary", [binary_row(i, version=1) for i in range(0, 150, 5)])
            mirror.wait_caught_up(made, now_ts())
            current = {name: Counter(r[PKS[name]] for r in mc.query(name, output_fields=[PKS[name]])) for name in made}
            rows = {"every_type": 398, "by_key": 198, "binary": 150}
            assert {name: sum(c.values()) for name, c in current.items()} == rows
            assert {name: mc.count(name) for name in made} == rows
            cids = {name: made[name]["collection_id"] for name in made}
            for name in made:   # the mirror holds each of Milvus's keys once: verify must say equal
                assert keys_in_delta(mirror.storage, cids[name], PKS[name]) == current[name], name

            rc, doc, err = verify(mirror, milvus, "--all-fields")
            reports = {c["collection"]: c for c in doc["collections"]}
            assert rc == 0 and doc["equal"], doc
            assert set(made) <= set(reports)
            for name, n in rows.items():
                summary = reports[name]["summary"]
                assert (summary["milvus_count"], summary["delta_rows"], summary["milvus_keys"],
                        summary["rows_compared"]) == (n, n, n, n), (name, summary)
                assert reports[name]["differences"] == [] and reports[name]["caught_up"], reports[name]
                assert f"{name}: Milvus count(*) {n:,}, Delta {n:,} rows; 0 key(s) differ" in err

            rc, doc, _ = verify(mirror, milvus, "--collection", "by_key", "--sample", "25", "--seed", "3")
            assert rc == 0 and [c["collection"] for c in doc["collections"]] == ["by_key"]
            assert doc["collections"][0]["summary"]["rows_compared"] == 25
        finally:
            mirror.stop()

    storage = mirror.storage
    hide(storage, cids["every_type"], "id", 7)
    append_copy(storage, cids["every_type"], "id", 12)
    append_copy(storage, cids["every_type"], "id", 20, one_step_off)
    hide(storage, cids["every_type"], "id", 20)
    hide(storage, cids["by_key"], "key", "k00005")
    # The edits as the tables' readers now see them, counted independently of verify.
    every_type = keys_in_delta(storage, cids["every_type"], "id")
    assert every_type - current["every_type"] == Counter({12: 1})
    assert current["every_type"] - every_type == Counter({7: 1})
    assert current["by_key"] - keys_in_delta(storage, cids["by_key"], "key") == Counter({"k00005": 1})

    rc, doc, err = verify(mirror, milvus, "--all-fields", "--catch-up-timeout", "0")
    reports = {c["collection"]: c for c in doc["collections"]}
    assert rc == 1 and not doc["equal"]
    found = Counter((d["kind"], d["key"]) for d in reports["every_type"]["differences"])
    assert found == Counter({("missing_in_delta", 7): 1, ("duplicated_in_delta", 12): 1, ("field_differs", 20): 1})
    by_key = {d["key"]: d for d in reports["every_type"]["differences"]}
    assert (by_key[12]["milvus_copies"], by_key[12]["delta_copies"]) == (1, 2)
    assert by_key[20]["fields"] == ["vec"]
    summary = reports["every_type"]["summary"]
    # One row gone and one doubled: the counts agree, the keys do not.
    assert (summary["milvus_count"], summary["delta_rows"], summary["missing_in_delta"], summary["duplicated_in_delta"],
            summary["field_differs"], summary["extra_in_delta"]) == (398, 398, 1, 1, 1, 0)
    assert [(d["kind"], d["key"]) for d in reports["by_key"]["differences"]] == [("missing_in_delta", "k00005")]
    assert (reports["by_key"]["summary"]["milvus_count"], reports["by_key"]["summary"]["delta_rows"]) == (198, 197)
    assert reports["binary"]["equal"] and reports["binary"]["differences"] == []
    assert not reports["every_type"]["caught_up"]   # DeltaNode is stopped: said, not waited for
