"""``admin verify`` of a collection a field was added to while it was live: Milvus's meta has the
field, and the mirror's table does not have it yet (DeltaNode widens the table at its first commit
after it reads the change) or has it null in the rows written before it. Milvus answers those rows
with null, or with the field's default value; so does verify's reading of the table
(admin.mirror_table, admin.row_differences): nothing differs, and a value that does differ is still
named. The table is a real Delta table on disk; Milvus's answers are the rows pymilvus's query gives,
written by the test."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from deltalake import write_deltalake

from deltanode.admin.mirror_table import MirrorTable
from deltanode.admin.row_differences import DifferenceKind, default_values
from deltanode.admin.verify import compare_fields
from deltanode.datacoord.catalog import CollectionRecord, encode_schema
from deltanode.delta.layout import StorageLayout
from deltanode.wire.schema import CollectionLayout, schema_from_json

CREATED = {"fields": [{"name": "id", "data_type": "Int64", "is_primary_key": True},
                      {"name": "vec", "data_type": "FloatVector", "dim": 2}]}
GROWN = {"fields": [*CREATED["fields"], {"name": "note", "data_type": "VarChar", "max_length": 16, "nullable": True},
                    {"name": "score", "data_type": "Float", "nullable": True, "default_value": 0.5}]}


class Milvus:
    """Milvus's query answers (pymilvus's rows, every field) for the keys asked; pure logic."""

    def __init__(self, rows: dict[int, dict]) -> None:
        self._rows = rows

    def rows(self, database: str, collection: str, pk, keys: list) -> list[dict]:
        return [self._rows[k] for k in keys if k in self._rows]


def insert_rows(layout: CollectionLayout, pks: list[int], **fields: list) -> pa.Table:
    """Rows of the insert table's columns as DeltaNode writes them (``fields``: the added ones)."""
    cols = {"id": pa.array(pks, pa.int64()), "vec": pa.array([[float(pk), 0.5] for pk in pks], pa.list_(pa.float32()))}
    cols.update({name: pa.array(values, layout.insert_schema().field(name).type) for name, values in fields.items()})
    cols.update({c: pa.array([pk * 10 for pk in pks], pa.int64())
                 for c in ("_ts", "_row_id", "_segment_id", "_partition_id")})
    return pa.table(cols)


def milvus_row(pk: int, note: str | None = None, score: float = 0.5) -> dict:
    return {"id": pk, "vec": [float(pk), 0.5], "note": note, "score": score}


def test_a_field_the_table_lacks_or_holds_null_compares_as_milvus_answers_the_rows_before_it(tmp_path):
    storage = StorageLayout(str(tmp_path))
    grown = schema_from_json(GROWN, "c")
    record = CollectionRecord(collection_id=5, name="c", schema_b64=encode_schema(grown), shards=1,
                              vchannels=["p_0_5v0"], pchannels=["p_0"])
    layout = CollectionLayout.from_proto(grown)
    uri = storage.insert_log(5)
    # The table as DeltaNode created it, before it read the change: no note, no score.
    write_deltalake(uri, insert_rows(CollectionLayout.from_proto(schema_from_json(CREATED, "c")), [1, 2, 3, 4]))
    before = {pk: milvus_row(pk) for pk in (1, 2, 3, 4)}

    compared, differ = compare_fields(Milvus(before), MirrorTable(storage=storage, collection_id=5, layout=layout),
                                      record, layout, [1, 2, 3, 4])
    assert (compared, differ) == (4, [])
    # A value that differs is still named: Milvus has a note, or a score other than the default.
    changed = {**before, 2: milvus_row(2, note="x"), 3: milvus_row(3, score=0.25)}
    compared, differ = compare_fields(Milvus(changed), MirrorTable(storage=storage, collection_id=5, layout=layout),
                                      record, layout, [1, 2, 3, 4])
    assert compared == 4
    assert [(d.key, d.kind, d.fields) for d in differ] == [(2, DifferenceKind.FIELD_DIFFERS, ("note",)),
                                                           (3, DifferenceKind.FIELD_DIFFERS, ("score",))]

    # Widened: the rows before the change hold null in both columns, the later ones their values.
    write_deltalake(uri, insert_rows(layout, [5, 6], note=["n5", None], score=[0.75, 0.5]), mode="append",
                    schema_mode="merge")
    after = {**before, 5: milvus_row(5, note="n5", score=0.75), 6: milvus_row(6)}
    table = MirrorTable(storage=storage, collection_id=5, layout=layout)
    assert sorted(table.keys()) == [1, 2, 3, 4, 5, 6]
    assert compare_fields(Milvus(after), table, record, layout, [1, 2, 3, 4, 5, 6]) == (6, [])


def test_default_values_as_the_table_holds_them():
    schema = schema_from_json({"fields": [
        {"name": "id", "data_type": "Int64", "is_primary_key": True},
        {"name": "score", "data_type": "Float", "nullable": True, "default_value": 0.5},
        {"name": "label", "data_type": "VarChar", "max_length": 8, "default_value": "none"},
        {"name": "plain", "data_type": "Int32", "nullable": True}]}, "c")
    assert default_values(schema) == {"score": 0.5, "label": "none"}
    schema.fields.add(fieldID=200, name="at", data_type=26, nullable=True).default_value.timestamptz_data = 1_500_000
    assert default_values(schema)["at"] == datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC)
