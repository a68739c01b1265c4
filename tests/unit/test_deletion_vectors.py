"""Deletion vectors: the format (round trips; a DV file written by Databricks Runtime, byte for
byte) and a real Delta table whose own commit JSON carries DVs (inline, a file, two DVs in one
prefixed file, an absolute path, a dense bitmap container), read by every reader at hand before
and after a delta-rs checkpoint, and what delta-rs's vacuum makes of DV files
(docs/deletion-vectors.md). No Spark."""

from __future__ import annotations

import importlib.metadata
import json
import os
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaProtocolError
from pyarrow import fs as pafs

from deltanode.delta import deletion_vectors as dv
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.log_replay import live_adds
from deltanode.delta.pk_bloom import PkBloom, hash_keys
from deltanode.delta.tables import read_table

from .. import dv_files

APP = Path(__file__).resolve().parents[2] / "app"
LOCAL = pafs.LocalFileSystem()
SCHEMA = pa.schema([("pk", pa.int64()), ("_ts", pa.int64())])
DUCKDB_DELTA = importlib.metadata.distribution("duckdb-ext-delta").locate_file(
    f"duckdb_ext/extensions/v{duckdb.__version__}/linux_amd64/delta.duckdb_extension")


def live_deletion_vectors(filesystem, root, version=None) -> dict:
    return {path: add.deletion_vector for path, add in live_adds(filesystem, root, version).items()}


# delta-kernel-rs's test table table-with-dv-small (written by Databricks Runtime): its DV file
# deletes rows 0 and 9; its add action: {"storageType":"u","pathOrInlineDv":"vBn[lx{q8@P<9BNH/isA",
# "offset":1,"sizeInBytes":36,"cardinality":2}.
DATABRICKS_DV = bytes.fromhex("0100000024d1d339640100000000000000000000003a30000001000000000001001000"
                              "0000000009002a671846")
DATABRICKS_UUID = uuid.UUID("61d16c75-6994-46b7-a15b-8b538852e50e")
TO_PYARROW_REFUSAL = ("The table has set these reader features: {'deletionVectors'} but these are not yet "
                      "supported by the deltalake reader.")


# --- the format --------------------------------------------------------------------------------

def test_z85_round_trips_and_matches_the_spec_vector():
    assert dv.z85_encode(bytes.fromhex("864FD26FB559F75B")) == "HelloWorld"      # ZeroMQ RFC 32
    assert dv.z85_decode("HelloWorld") == bytes.fromhex("864FD26FB559F75B")
    data = np.random.default_rng(0).integers(0, 256, 4003, dtype=np.uint8).tobytes()
    assert dv.z85_decode(dv.z85_encode(data))[:len(data)] == data                 # zero-padded to 4 bytes
    for bad in ("Hell", "Hello World", "Hell\"", "é" * 5):
        with pytest.raises(dv.CorruptDeletionVector):
            dv.z85_decode(bad)


def test_a_dv_file_is_byte_for_byte_what_databricks_writes():
    out = dv_files.file([[0, 9]], file_id=DATABRICKS_UUID)
    assert out.data == DATABRICKS_DV
    assert out.path == f"deletion_vector_{DATABRICKS_UUID}.bin"
    assert out.descriptors[0].to_json() == {"storageType": "u", "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA", "offset": 1,
                                            "sizeInBytes": 36, "cardinality": 2}


def test_the_protocols_relative_path_example():
    d = dv.DeletionVector.from_json({"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
                                     "sizeInBytes": 40, "cardinality": 6})
    assert d.relative_path == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert d.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"


def test_a_file_dv_without_offset_keeps_its_unique_id_and_reads_from_the_first_dv(tmp_path):
    written, = dv_files.write_file([[2, 3]], str(tmp_path), LOCAL)
    bare = {k: v for k, v in written.to_json().items() if k != "offset"}
    d = dv.DeletionVector.from_json(bare)
    assert d.offset is None and d.to_json() == bare and d.unique_id == "u" + bare["pathOrInlineDv"]
    assert dv.positions(d, str(tmp_path), LOCAL).tolist() == [2, 3]
    with pytest.raises(dv.CorruptDeletionVector):
        dv.DeletionVector(storage_type="i", path_or_inline_dv="", offset=1, size_in_bytes=0, cardinality=0)


@pytest.mark.parametrize("positions", [
    [], [0], [3, 4, 7, 11, 18, 29],
    np.random.default_rng(1).choice(1 << 20, 5000, replace=False),                  # sparse, many containers
    np.arange(0, 200_000, 3),                                                         # > 4096 per chunk: bitmaps
    np.arange(65536),                                                                 # a full chunk
    [5, (1 << 32) - 1, 1 << 32, (1 << 32) + 7, 5 << 40, dv.MAX_POSITION],             # several buckets
], ids=["empty", "zero", "six", "sparse", "dense", "full-chunk", "above-2^32"])
def test_roaring_round_trips(positions):
    want = np.unique(np.asarray(positions, np.uint64))
    got = dv.deserialize(dv.serialize(positions))
    assert got.dtype == np.uint64 and np.array_equal(got, want)


def test_serialize_takes_unsorted_duplicates_and_refuses_what_delta_cannot_hold():
    assert np.array_equal(dv.deserialize(dv.serialize(np.array([9, 2, 9, 0], np.int64))), [0, 2, 9])
    with pytest.raises(ValueError):
        dv.serialize(np.array([-1]))
    with pytest.raises(ValueError):
        dv.serialize(np.array([1 << 63], np.uint64))       # a bucket key's high bit must be 0


def _bitmap32_with_runs(containers: list[tuple[int, str, list]]) -> bytes:
    """A 32-bit roaring bitmap with the run cookie, written here from the RoaringFormatSpec
    (DeltaNode never writes runs; Spark writers do, after runOptimize)."""
    n = len(containers)
    flags = bytearray((n + 7) // 8)
    bodies, header = [], b""
    for i, (key, kind, values) in enumerate(containers):
        if kind == "run":
            flags[i // 8] |= 1 << (i % 8)
            body = struct.pack("<H", len(values)) + b"".join(struct.pack("<HH", s, ln - 1) for s, ln in values)
            card = sum(ln for _, ln in values)
        else:
            body, card = np.asarray(values, "<u2").tobytes(), len(values)
        header += struct.pack("<HH", key, card - 1)
        bodies.append(body)
    offsets = b""
    if n >= 4:
        at = 4 + len(flags) + 8 * n
        for body in bodies:
            offsets += struct.pack("<I", at)
            at += len(body)
    return struct.pack("<I", 12347 | (n - 1) << 16) + bytes(flags) + header + offsets + b"".join(bodies)


@pytest.mark.parametrize("extra", [0, 3], ids=["no-offset-header", "offset-header"])
def test_run_containers_and_the_run_cookie_are_read(extra):
    containers = [(0, "run", [(10, 5), (100, 1)]), (1, "array", [7, 9])]
    containers += [(2 + i, "run", [(0, 3)]) for i in range(extra)]
    data = struct.pack("<IQI", dv.MAGIC, 1, 3) + _bitmap32_with_runs(containers)
    want = [(3 << 32) + v for v in [10, 11, 12, 13, 14, 100, 65536 + 7, 65536 + 9]]
    want += [(3 << 32) + ((2 + i) << 16) + j for i in range(extra) for j in range(3)]
    assert dv.deserialize(data).tolist() == want


def test_corrupt_bitmaps_are_refused():
    good = dv.serialize([1, 2, 3])
    for bad in (good[:-1], b"\0" + good[1:], good[:16] + b"\0" + good[17:]):   # truncated, magic, cookie
        with pytest.raises(dv.CorruptDeletionVector):
            dv.deserialize(bad)


def test_inline_and_file_dvs_read_back(tmp_path):
    inline = dv.inline(np.arange(0, 10_000, 2))
    assert inline.storage_type == "i" and inline.offset is None and inline.cardinality == 5000
    assert dv.DeletionVector.from_json(json.loads(json.dumps(inline.to_json()))) == inline
    assert np.array_equal(dv.positions(inline, str(tmp_path), None), np.arange(0, 10_000, 2))

    sets = [[1, 2], np.arange(100_000), [1 << 33]]
    written = dv_files.write_file(sets, str(tmp_path), LOCAL, prefix="q7")
    assert [d.offset for d in written] == [1, 1 + 8 + written[0].size_in_bytes,
                                           1 + 16 + written[0].size_in_bytes + written[1].size_in_bytes]
    assert (tmp_path / written[0].relative_path).is_file() and written[0].relative_path.startswith("q7/")
    for d, want in zip(written, sets):
        back = dv.DeletionVector.from_json(json.loads(json.dumps(d.to_json())))
        assert np.array_equal(dv.positions(back, str(tmp_path), LOCAL), want)

    absolute = dv.DeletionVector(storage_type="p", path_or_inline_dv=(tmp_path / written[1].relative_path).as_uri(),
                                 offset=written[1].offset, size_in_bytes=written[1].size_in_bytes,
                                 cardinality=written[1].cardinality)
    assert np.array_equal(dv.positions(absolute, "/elsewhere", LOCAL), np.arange(100_000))


def test_a_damaged_dv_file_is_detected(tmp_path):
    d, = dv_files.write_file([[4, 5, 6]], str(tmp_path), LOCAL)
    path = tmp_path / d.relative_path
    data = bytearray(path.read_bytes())
    data[-6] ^= 0x10                        # a bit of the bitmap: the CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(dv.CorruptDeletionVector, match="CRC-32"):
        dv.positions(d, str(tmp_path), LOCAL)
    with pytest.raises(dv.CorruptDeletionVector, match="size"):
        dv.positions(dv.DeletionVector(**{**_fields(d), "size_in_bytes": d.size_in_bytes - 1}), str(tmp_path), LOCAL)
    with pytest.raises(dv.CorruptDeletionVector, match="holds 3 positions"):
        dv.positions(dv.DeletionVector(**{**_fields(dv.inline([4, 5, 6])), "cardinality": 2}), "", None)


def _fields(d: dv.DeletionVector) -> dict:
    return {"storage_type": d.storage_type, "path_or_inline_dv": d.path_or_inline_dv, "offset": d.offset,
            "size_in_bytes": d.size_in_bytes, "cardinality": d.cardinality}


def test_union_only_grows(tmp_path):
    assert dv_files.union(None, [5, 1, 5]).tolist() == [1, 5]
    old, = dv_files.write_file([[2, 9]], str(tmp_path), LOCAL)
    assert dv_files.union(old, [3, 9], str(tmp_path), LOCAL).tolist() == [2, 3, 9]
    assert dv_files.union(dv.inline([2, 9]), [9]).size == 2                           # nothing new: nothing to commit
    with pytest.raises(ValueError, match="filesystem"):
        dv_files.union(old, [1])


def test_keep_mask():
    assert dv.keep_mask(np.array([0, 2], np.uint64), 4).tolist() == [False, True, False, True]
    with pytest.raises(dv.CorruptDeletionVector):
        dv.keep_mask(np.array([4], np.uint64), 4)


# --- a real table ------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class DvTable:
    root: Path
    adds: dict[str, dict]            # the live add actions by file name
    deleted: dict[str, np.ndarray]   # positions deleted per file name
    version: int

    @property
    def uri(self) -> str:
        return str(self.root)

    def expected(self) -> list[int]:
        """pk of every row not deleted (pk = file base + row position)."""
        out = []
        for name, add in self.adds.items():
            n, base = json.loads(add["stats"])["numRecords"], BASES[name]
            out += (base + np.flatnonzero(dv.keep_mask(self.deleted.get(name, np.empty(0, np.uint64)), n))).tolist()
        return sorted(out)

    def dv_files(self) -> set[str]:
        return {p.name for p in self.root.rglob("deletion_vector_*.bin")}


BASES = {"a": 0, "b": 1000, "c": 2000, "d": 3000, "e": 1_000_000, "f": 4000}
ROWS = {"a": 10, "b": 10, "c": 10, "d": 10, "e": 70_000, "f": 10}


def _commit(root: Path, version: int, actions: list[dict]) -> None:
    """One Delta version as DeltaNode writes it (delta_log.DeltaLog.commit): put if absent."""
    lines = [{"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "DELETE", "engineInfo": "test"}}]
    with open(root / "_delta_log" / f"{version:020d}.json", "x") as f:
        f.writelines(json.dumps(a, separators=(",", ":")) + "\n" for a in lines + actions)


def _write_file(root: Path, name: str) -> dict:
    n, base = ROWS[name], BASES[name]
    # Row groups of 16,384 rows: file e is read in several batches, each masked by its own slice.
    pq.write_table(pa.table({"pk": np.arange(base, base + n, dtype=np.int64), "_ts": np.full(n, 7, np.int64)}),
                   root / f"{name}.parquet", row_group_size=16_384)
    stats = {"numRecords": n, "minValues": {"pk": base, "_ts": 7}, "maxValues": {"pk": base + n - 1, "_ts": 7},
             "nullCount": {"pk": 0, "_ts": 0}}
    return {"path": f"{name}.parquet", "partitionValues": {}, "size": (root / f"{name}.parquet").stat().st_size,
            "modificationTime": int(time.time() * 1000), "dataChange": True, "stats": json.dumps(stats)}


def _remove(add: dict) -> dict:
    """The remove of a logical file: its path and the DV it had."""
    out = {"path": add["path"], "deletionTimestamp": int(time.time() * 1000), "dataChange": True,
           "extendedFileMetadata": True, "partitionValues": {}, "size": add["size"]}
    return {**out, "deletionVector": add["deletionVector"]} if "deletionVector" in add else out


def _with_dv(add: dict, descriptor: dv.DeletionVector) -> dict:
    """The add of the same file with a DV: numRecords stays the file's, bounds become wide."""
    stats = {**json.loads(add["stats"]), "tightBounds": False}
    return {**add, "stats": json.dumps(stats), "deletionVector": descriptor.to_json()}


def make_table(root: Path) -> DvTable:
    """Created as DeltaNode creates its tables (delta-rs's version 0, protocol 1/2, TABLE_CONFIG); files
    added; upgraded to reader 3 / writer 7 with deletionVectors; then DVs: ``a`` inline, ``b`` in
    a file of its own, ``c`` and ``d`` in one file under a random prefix, ``e`` (70,000 rows, a
    dense chunk: bitmap container) by absolute path; ``f`` has none."""
    DeltaLog(str(root), SCHEMA)
    log0 = [json.loads(line) for line in (root / "_delta_log" / f"{0:020d}.json").read_text().splitlines()]
    protocol = next(a["protocol"] for a in log0 if "protocol" in a)
    meta = next(a["metaData"] for a in log0 if "metaData" in a)
    assert (protocol, meta["configuration"]) == ({"minReaderVersion": 1, "minWriterVersion": 2},
                                                 {"delta.enableExpiredLogCleanup": "false"})
    adds = {name: _write_file(root, name) for name in BASES}
    _commit(root, 1, [{"add": a} for a in adds.values()])
    # Writer version 2 implies appendOnly and invariants: listed at version 7, as Spark's upgrade does.
    _commit(root, 2, [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                                    "writerFeatures": ["appendOnly", "invariants", "deletionVectors"]}},
                      {"metaData": {**meta, "configuration": {**meta["configuration"],
                                                              "delta.enableDeletionVectors": "true"}}}])
    # a: 38 bytes serialized, zero-padded to 40 for Z85 (the padding readers must ignore).
    deleted = {"a": [1, 3, 4], "b": [0, 9], "c": [5], "d": [0, 1, 2, 3, 5, 6, 7, 8, 9],
               "e": np.concatenate([np.arange(0, 65536, 3), np.arange(65536, 70_000, 1000)])}
    deleted = {k: dv.as_positions(v) for k, v in deleted.items()}
    b, = dv_files.write_file([deleted["b"]], str(root), LOCAL)
    c, d = dv_files.write_file([deleted["c"], deleted["d"]], str(root), LOCAL, prefix="x3")
    e_file, = dv_files.write_file([deleted["e"]], str(root), LOCAL)
    e = dv.DeletionVector(**{**_fields(e_file), "storage_type": "p",
                             "path_or_inline_dv": (root / e_file.relative_path).as_uri()})
    new = {"a": dv.inline(deleted["a"]), "b": b, "c": c, "d": d, "e": e}
    assert new["a"].size_in_bytes == 38 and len(new["a"].path_or_inline_dv) == 50
    _commit(root, 3, [{"remove": _remove(adds["a"])}, {"add": _with_dv(adds["a"], new["a"])}])
    _commit(root, 4, [action for name in "bcde" for action in
                      ({"remove": _remove(adds[name])}, {"add": _with_dv(adds[name], new[name])})])
    adds.update({name: _with_dv(adds[name], d) for name, d in new.items()})
    return DvTable(root=root, adds=adds, deleted=deleted, version=4)


def delete_more(table: DvTable, name: str, positions) -> DvTable:
    """One more version: ``name``'s DV (if any) replaced by a new file holding the old one's
    positions and ``positions`` (an old DV file stays, referenced by the remove)."""
    found = table.adds[name].get("deletionVector")
    old = None if found is None else dv.DeletionVector.from_json(found)
    new, = dv_files.write_file([dv_files.union(old, positions, table.uri, LOCAL)], table.uri, LOCAL)
    add = _with_dv(table.adds[name], new)
    _commit(table.root, table.version + 1, [{"remove": _remove(table.adds[name])}, {"add": add}])
    return DvTable(root=table.root, adds={**table.adds, name: add},
                   deleted={**table.deleted, name: dv.positions(new, table.uri, LOCAL)}, version=table.version + 1)


@pytest.fixture
def table(tmp_path) -> DvTable:
    return make_table(tmp_path / "insert_log")


def _pks(t: pa.Table | pl.DataFrame) -> list[int]:
    return sorted(t["pk"].to_list()) if isinstance(t, pl.DataFrame) else sorted(t.column("pk").to_pylist())


def by_read_table(uri: str) -> list[int]:
    return _pks(read_table(StorageLayout(os.path.dirname(uri)), uri))


def by_duckdb(uri: str) -> list[int]:
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{DUCKDB_DELTA}'")
    rows = con.execute(f"SELECT pk FROM delta_scan('{uri}')").fetchall()
    assert con.execute(f"SELECT count(*) FROM delta_scan('{uri}')").fetchone()[0] == len(rows)
    return sorted(r[0] for r in rows)


def by_polars_scan(uri: str) -> list[int]:
    assert pl.scan_delta(uri).select(pl.len()).collect().item() == len(pl.scan_delta(uri).collect())
    return _pks(pl.scan_delta(uri).collect())


def by_polars_read(uri: str) -> list[int]:
    return _pks(pl.read_delta(uri))


def by_datafusion_sql(uri: str) -> list[int]:
    rows = pa.table(QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT pk FROM t").read_all())
    count = pa.table(QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT count(*) AS n FROM t").read_all())
    assert count.column("n")[0].as_py() == rows.num_rows
    return _pks(rows)


def by_deltalake_scan(uri: str) -> list[int]:
    return _pks(pa.table(DeltaTable(uri).scan(columns=["pk"])))


READERS = [by_read_table, by_duckdb, by_polars_scan, by_polars_read, by_datafusion_sql, by_deltalake_scan]


@pytest.mark.parametrize("checkpoint", [False, True], ids=["json-log", "checkpoint"])
@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__.removeprefix("by_"))
def test_readers_see_exactly_the_rows_not_deleted(table, reader, checkpoint, monkeypatch):
    monkeypatch.delenv("POLARS_DELTA_READER_FEATURE_DV", raising=False)   # Polars 2.1 does not need it
    if checkpoint:
        DeltaTable(table.uri).create_checkpoint()
        table = delete_more(table, "f", [2])               # a JSON version after the checkpoint
    want = table.expected()
    assert len(want) == sum(ROWS.values()) - sum(p.size for p in table.deleted.values())
    assert reader(table.uri) == want


def test_polars_reads_the_same_with_the_dv_feature_variable(table, monkeypatch):
    monkeypatch.setenv("POLARS_DELTA_READER_FEATURE_DV", "1")
    assert by_polars_scan(table.uri) == by_polars_read(table.uri) == table.expected()


@pytest.mark.parametrize("checkpoint", [False, True], ids=["json-log", "checkpoint"])
def test_delta_rs_pyarrow_datasets_refuse_dv_tables_and_count_ignores_dvs(table, checkpoint):
    if checkpoint:
        DeltaTable(table.uri).create_checkpoint()
    t = DeltaTable(table.uri)
    for read in (t.to_pyarrow_dataset, t.to_pyarrow_table, t.to_pandas):
        with pytest.raises(DeltaProtocolError) as e:
            read()
        assert str(e.value) == TO_PYARROW_REFUSAL
    assert t.count() == sum(ROWS.values())                  # numRecords summed: deleted rows counted
    actions = pa.table(t.get_add_actions(flatten=True))
    assert not any("deletion" in c.lower() for c in actions.column_names)   # no DV descriptors exposed


def test_the_checkpoint_carries_the_descriptors(table):
    before = live_deletion_vectors(LOCAL, table.uri)
    assert {k: v and v.to_json() for k, v in before.items()} == \
        {a["path"]: a.get("deletionVector") for a in table.adds.values()}
    DeltaTable(table.uri).create_checkpoint()
    assert (table.root / "_delta_log" / f"{table.version:020d}.checkpoint.parquet").is_file()
    assert live_deletion_vectors(LOCAL, table.uri) == before
    later = delete_more(table, "b", [4])
    now = live_deletion_vectors(LOCAL, later.uri)
    assert now["b.parquet"].to_json() == later.adds["b"]["deletionVector"] and now["a.parquet"] == before["a.parquet"]
    assert live_deletion_vectors(LOCAL, later.uri, version=table.version) == before     # from the checkpoint
    assert live_deletion_vectors(LOCAL, later.uri, version=2) == {f"{n}.parquet": None for n in BASES}  # listed


def test_a_remove_without_the_files_dv_removes_nothing(table):
    """A logical file is (path, DV): a remove must carry the DV the file has, or it names a
    logical file that is not there and the file stays, for delta-rs and DuckDB alike."""
    _commit(table.root, table.version + 1, [{"remove": {k: v for k, v in _remove(table.adds["b"]).items()
                                                        if k != "deletionVector"}}])
    assert "b.parquet" in pa.table(DeltaTable(table.uri).get_add_actions(flatten=True)).column("path").to_pylist()
    assert by_duckdb(table.uri) == by_read_table(table.uri) == table.expected()
    assert "b.parquet" in live_deletion_vectors(LOCAL, table.uri)
    _commit(table.root, table.version + 2, [{"remove": _remove(table.adds["b"])}])
    assert by_duckdb(table.uri) == by_read_table(table.uri) == [p for p in table.expected() if not 1000 <= p < 1010]
    assert "b.parquet" not in live_deletion_vectors(LOCAL, table.uri)


def test_read_table_matches_the_descriptors_applied_by_hand(table):
    """read_table takes delta-rs's keep masks; the DVs read here from the log must agree."""
    rows = []
    for path, descriptor in live_deletion_vectors(LOCAL, table.uri).items():
        pks = pq.read_table(table.root / path).column("pk").to_numpy()
        deleted = dv.positions(descriptor, table.uri, LOCAL) if descriptor else np.empty(0, np.uint64)
        rows += pks[dv.keep_mask(deleted, pks.size)].tolist()
    assert sorted(rows) == by_read_table(table.uri) == table.expected()


def test_read_table_columns_and_versions(table):
    storage = StorageLayout(str(table.root.parent))
    assert read_table(storage, table.uri, columns=[]).num_rows == len(table.expected())
    assert read_table(storage, table.uri, columns=["_ts"]).column_names == ["_ts"]
    assert read_table(storage, table.uri, version=1).num_rows == sum(ROWS.values())      # before any DV
    assert _pks(read_table(storage, table.uri, version=3)) == sorted(
        set(range(BASES["e"], BASES["e"] + ROWS["e"])) | {p for n in "abcdf" for p in range(BASES[n], BASES[n] + 10)}
        - {1, 3, 4})


READER = """
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
print(read_table(StorageLayout({root!r}), {uri!r}).num_rows)
"""


def test_a_process_that_read_a_dv_table_exits_cleanly(table):
    """The DVs come through delta-rs (``deletion_vectors()``); the process must not abort at its
    exit as one reading data through delta-rs's filesystem does (test_read_table)."""
    code = READER.format(root=str(table.root.parent), uri=table.uri)
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=APP, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(6)]
    results = [(p.wait(timeout=120), p.stdout.read().strip(), p.stderr.read()[-300:]) for p in procs]
    assert [r[0] for r in results] == [0] * 6, [r[2] for r in results if r[0]]
    assert {r[1] for r in results} == {str(len(table.expected()))}


# --- vacuum --------------------------------------------------------------------------------------

def _vacuum(table: DvTable, *, full: bool, hours: int | None = 0) -> set[str]:
    found = DeltaTable(table.uri).vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False,
                                         full=full)
    return {os.path.basename(p) for p in found}


def test_delta_rs_full_vacuum_lists_live_dv_files(table):
    """delta-rs 1.6.6 does not count DV files as referenced: a full vacuum lists (and without
    dry_run deletes) every DV file older than its retention, live or not; a lite vacuum none."""
    live = table.dv_files()
    assert len(live) == 3
    assert _vacuum(table, full=False) == set()
    assert _vacuum(table, full=True) == live
    assert _vacuum(table, full=True, hours=None) == set()           # 7 days' retention, by file age...
    week_ago = time.time() - 8 * 86400
    for name in live:
        path = next(table.root.rglob(name))
        os.utime(path, (week_ago, week_ago))
    assert _vacuum(table, full=True, hours=None) == live           # ...and then they go, though live


def test_delta_rs_vacuum_and_a_replaced_dv_file(table):
    DeltaTable(table.uri).create_checkpoint()
    old = table.dv_files()
    later = delete_more(table, "b", [4])
    assert later.dv_files() - old                                      # the new DV file
    assert _vacuum(later, full=False) == set()                         # lite never lists a DV file
    assert _vacuum(later, full=True) == later.dv_files()              # full: the replaced one and the live ones


# --- the primary-key filter --------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["int64", "string", "large_string"])
def test_pk_bloom_has_no_false_negatives_and_about_one_percent_false_positives(kind):
    rng = np.random.default_rng(7)
    values = rng.choice(1 << 40, 40_000, replace=False).astype(np.int64)
    if kind == "int64":
        keys, others = pa.array(values[:20_000]), pa.chunked_array([values[20_000:30_000], values[30_000:]])
    else:
        words = [f"doc-{v}" + "x" * int(v % 23) for v in values]
        typ = pa.string() if kind == "string" else pa.large_string()
        keys, others = pa.array(words[:20_000], typ).slice(0), pa.array(words[19_999:], typ).slice(1)
    bloom = PkBloom.build(keys)
    assert bloom.might_contain(keys).all()
    assert 0.002 < bloom.might_contain(others).mean() < 0.02
    back = PkBloom.from_bytes(bloom.to_bytes())
    assert (back.kind, back.probes, back.num_bits, back.count) == (bloom.kind, 7, bloom.num_bits, 20_000)
    assert np.array_equal(back.might_contain(others), bloom.might_contain(others))


def test_pk_bloom_strings_differ_by_every_byte_and_length():
    keys = pa.array(["", "a", "a\0", "ab", "abcdefgh", "abcdefgh\0", "abcdefghi", "é", "\U0001F600" * 3])
    bloom = PkBloom.build(keys)
    assert bloom.might_contain(keys).all()
    assert len(set(hash_keys(keys).tolist())) == len(keys)
    assert hash_keys(keys.slice(3, 2)).tolist() == hash_keys(keys).tolist()[3:5]


def test_pk_bloom_refuses_mixed_kinds_and_nulls():
    bloom = PkBloom.build(np.arange(10))
    with pytest.raises(TypeError):
        bloom.might_contain(pa.array(["1"]))
    with pytest.raises(ValueError):
        PkBloom.build(pa.array([1, None]))
    with pytest.raises(ValueError):
        PkBloom.from_bytes(b"XXXX" + bloom.to_bytes()[4:])
    assert not PkBloom.build(pa.array([], pa.int64())).might_contain(np.arange(100)).any()


@pytest.mark.parametrize("first", [1, -5, 470718251077206016, (1 << 63) - 50, -(1 << 63)])
def test_pk_filter_of_a_run_of_keys_is_exact(first):
    """Keys k, k+1, ..., k+49 in order (auto-generated ids): a run filter, exact and without bits;
    any other order or gap gets a bloom filter."""
    keys = pa.chunked_array([np.arange(first, first + 20, dtype=np.int64),
                             np.arange(first + 20, first + 50, dtype=np.int64)])
    run = PkBloom.build(keys)
    assert (run.kind, run.num_bits, run.count, run.bits.size) == ("int64-run", 0, 50, 0)
    back = PkBloom.from_bytes(run.to_bytes())
    assert (back.kind, back.seed, back.count) == ("int64-run", first, 50)
    probes = np.array([first, first + 49, first + 25] + [v for v in (first - 1, first + 50)
                                                          if -(1 << 63) <= v < (1 << 63)], dtype=np.int64)
    expected = [True, True, True] + [False] * (len(probes) - 3)
    assert back.might_contain(probes).tolist() == expected == run.might_contain(pa.array(probes)).tolist()
    with pytest.raises(TypeError):
        back.might_contain(pa.array(["1"]))
    values = np.arange(first, first + 50, dtype=np.int64)
    assert (PkBloom.build(values).kind, PkBloom.build(values).seed) == ("int64-run", first)   # as a writer has them
    for others in (values[::-1].copy(), np.delete(values, 7), np.append(values, values[-1])):
        assert PkBloom.build(others).kind == "int64"


def test_pk_filter_of_keys_that_wrap_around_int64_is_a_bloom_filter():
    keys = np.array([(1 << 63) - 1, -(1 << 63)], dtype=np.int64)   # consecutive modulo 2**64 only
    bloom = PkBloom.build(keys)
    assert bloom.kind == "int64" and bloom.might_contain(keys).all()
