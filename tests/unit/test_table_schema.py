"""An insert_log table widened by the columns of a field added to the live collection
(``storage.table_schema``, ``DeltaLog.commit(schema=...)``): the commit whose files may have new
columns carries a ``metaData`` with them, nullable, and the Milvus schema in the configuration; the
older files read as null there in delta-rs, DuckDB, Polars and DataFusion; a commit never narrows
the table (another writer's older schema), and a table that has the columns gets no ``metaData``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltanode.delta import table_schema
from deltanode.delta.actions import AddFile
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.table_schema import SCHEMA_KEY, TableSchema, recorded_schema
from deltanode.delta.tables import read_table
from deltanode.wire.milvus_proto import schema_pb2

from ..delta_readers import READERS

OLD = pa.schema([pa.field("pk", pa.int64()), pa.field("vec", pa.list_(pa.field("element", pa.float32())))])
NEW = OLD.append(pa.field("note", pa.string())).append(pa.field("at", pa.timestamp("us", tz="UTC")))


def milvus(version: int) -> bytes:
    return schema_pb2.CollectionSchema(name="c", version=version).SerializeToString()


def write(uri: str, name: str, table: pa.Table) -> AddFile:
    path = Path(uri) / f"{name}.parquet"
    pq.write_table(table, path)
    return AddFile(path=path.name, size=path.stat().st_size, stats=json.dumps({"numRecords": len(table)}))


def version_lines(uri: str, version: int) -> list[dict]:
    return [json.loads(line) for line in (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def test_the_commit_of_files_with_new_columns_widens_the_table_and_every_reader_reads_old_rows_as_null(tmp_path):
    storage = StorageLayout(str(tmp_path))
    uri = storage.insert_log(1)
    log = DeltaLog(uri, OLD)
    old = write(uri, "old", pa.table({"pk": [1, 2], "vec": [[1.0, 2.0], [3.0, 4.0]]}, schema=OLD))
    log.commit(adds=[old], txns={"v0": 1}, expected={}, info={}, schema=TableSchema(columns=OLD,
                                                                                    milvus_schema=milvus(0)))
    assert not any("metaData" in a for a in version_lines(uri, 1))   # the table has every column
    new = write(uri, "new", pa.table({"pk": [3, 4], "vec": [[5.0, 6.0], [7.0, 8.0]], "note": ["x", None],
                                      "at": pa.array([10, None], pa.timestamp("us", tz="UTC"))}, schema=NEW))
    log.commit(adds=[new], txns={"v0": 2}, expected={"v0": 1}, info={},
               schema=TableSchema(columns=NEW, milvus_schema=milvus(1)))
    [meta] = [a["metaData"] for a in version_lines(uri, 2) if "metaData" in a]
    fields = json.loads(meta["schemaString"])["fields"]
    assert [(f["name"], f["type"], f["nullable"]) for f in fields] == [
        ("pk", "long", True), ("vec", {"type": "array", "elementType": "float", "containsNull": True}, True),
        ("note", "string", True), ("at", "timestamp", True)]
    assert meta["configuration"]["delta.enableExpiredLogCleanup"] == "false"   # kept
    assert recorded_schema(meta["configuration"]).version == 1
    assert recorded_schema(DeltaLog.open(uri).configuration()).version == 1   # as another process reads it

    want = Counter({(1, None, None): 1, (2, None, None): 1, (3, "x", 10): 1, (4, None, None): 1})
    ours = read_table(storage, uri, ["pk", "note", "at"])
    as_micros = ours.set_column(2, "at", ours.column("at").cast(pa.int64()))
    assert Counter(map(tuple, map(dict.values, as_micros.to_pylist()))) == want
    for name, reader in READERS.items():
        got = reader(uri, ["pk", "note", "at"])
        at = [None if v is None else int(v.timestamp() * 1_000_000) for v in got.column("at").to_pylist()]
        assert Counter(zip(got.column("pk").to_pylist(), got.column("note").to_pylist(), at)) == want, name


def test_a_commit_never_narrows_the_table_and_one_that_has_its_columns_carries_no_metadata(tmp_path):
    uri = StorageLayout(str(tmp_path)).insert_log(1)
    DeltaLog(uri, OLD)
    widening, stale = DeltaLog.open(uri), DeltaLog.open(uri)
    widening.commit(txns={"v0": 1}, expected={}, info={}, schema=TableSchema(columns=NEW, milvus_schema=milvus(1)))
    # A writer that still writes with the older schema (another DataNode's vchannel of the
    # collection, before it read the change): its commit lands after the widening one, changing no
    # column nor the recorded schema.
    stale.commit(txns={"v1": 1}, expected={}, info={}, schema=TableSchema(columns=OLD, milvus_schema=milvus(0)))
    assert stale.version == 2 and not any("metaData" in a for a in version_lines(uri, 2))
    stale.commit(txns={"v1": 2}, expected={}, info={}, schema=TableSchema(columns=NEW, milvus_schema=milvus(1)))
    assert not any("metaData" in a for a in version_lines(uri, 3))
    assert recorded_schema(DeltaLog.open(uri).configuration()).version == 1
    assert [f["name"] for f in json.loads(DeltaLog.open(uri).metadata()["schemaString"])["fields"]] == NEW.names


def test_deletion_vectors_and_new_columns_in_one_commit_make_one_metadata(tmp_path):
    uri = StorageLayout(str(tmp_path)).insert_log(1)
    log = DeltaLog(uri, OLD)
    actions = log._metadata_actions(True, TableSchema(columns=NEW, milvus_schema=milvus(1)))
    assert [next(iter(a)) for a in actions] == ["protocol", "metaData"]
    config = actions[1]["metaData"]["configuration"]
    assert config["delta.enableDeletionVectors"] == "true" and SCHEMA_KEY in config
    assert log._metadata_actions(False, TableSchema(columns=OLD, milvus_schema=milvus(0))) == []


def test_what_a_configuration_records_reads_back_or_is_refused():
    assert recorded_schema({}) is None and recorded_schema(None) is None
    schema = TableSchema(columns=OLD, milvus_schema=milvus(3))
    assert recorded_schema(schema.configuration()).version == 3
    with pytest.raises(ValueError, match=f"the table's {SCHEMA_KEY} is not a base64 CollectionSchema"):
        recorded_schema({SCHEMA_KEY: "not base64!"})
    assert table_schema.widened(json.dumps({"type": "struct", "fields": [
        {"name": n, "type": "long", "nullable": True, "metadata": {}} for n in ("pk", "vec", "note", "at")]}),
        NEW) is None
