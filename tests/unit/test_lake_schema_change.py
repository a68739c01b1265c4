"""A lake view of a collection whose live schema gained fields (``lake.views``): it takes the schema
its Delta table records when that is newer than the catalog's, reads a column the table lacks as
null, and shows a field's default value where the table holds null, as Milvus's query does."""

from __future__ import annotations

import json

import pyarrow as pa

from deltanode.datacoord.catalog import CollectionRecord, encode_schema
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.table_schema import SCHEMA_KEY, TableSchema
from deltanode.lake import views
from deltanode.lake.tables import lake_tables
from deltanode.wire.milvus_proto import schema_pb2
from deltanode.wire.schema import CollectionLayout, schema_from_json

CREATED = schema_from_json({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                                       {"name": "vec", "data_type": "FloatVector", "dim": 2}]}, "docs")


def with_fields(version: int) -> schema_pb2.CollectionSchema:
    """The collection after Milvus added ``score`` (default 1.5) and ``label`` (default "none"),
    and ``note`` (no default)."""
    schema = schema_pb2.CollectionSchema()
    schema.CopyFrom(CREATED)
    schema.version = version
    schema.fields.add(fieldID=102, name="score", data_type=schema_pb2.DataType.Float, nullable=True,
                      default_value=schema_pb2.ValueField(float_data=1.5))
    schema.fields.add(fieldID=103, name="label", data_type=schema_pb2.DataType.VarChar, nullable=True,
                      default_value=schema_pb2.ValueField(string_data="it's none"))
    schema.fields.add(fieldID=104, name="note", data_type=schema_pb2.DataType.VarChar, nullable=True)
    return schema


def test_defaults_show_where_the_table_holds_null_and_a_column_the_table_lacks_reads_null(tmp_path):
    storage = StorageLayout(str(tmp_path))
    record = CollectionRecord(5, "docs", encode_schema(with_fields(1)), 1, ["v5"], ["p"])
    [table] = lake_tables([record], storage)
    assert views.default_literals(table.schema) == {"score": "CAST('1.5' AS FLOAT)",
                                                    "label": "CAST('it\\'s none' AS STRING)"}
    sql = views.view_statement(table, True, present=frozenset(["pk", "vec", "score", "label", "_ts", "_row_id",
                                                               "_segment_id", "_partition_id"]))
    assert ("AS SELECT `pk`, `vec`, COALESCE(`score`, CAST('1.5' AS FLOAT)), COALESCE(`label`, "
            "CAST('it\\'s none' AS STRING)), CAST(NULL AS STRING), `_ts`, ") in sql
    assert "`note` COMMENT 'Milvus VarChar, nullable'" in sql


def _stored(log: DeltaLog) -> tuple[frozenset[str], dict[str, str]]:
    """What ``views.stored`` reads of the table through Spark: its columns and its configuration."""
    meta = log.metadata()
    assert meta is not None
    return frozenset(f["name"] for f in json.loads(meta["schemaString"])["fields"]), log.configuration()


def test_a_view_takes_the_newer_schema_its_table_records(tmp_path):
    storage = StorageLayout(str(tmp_path))
    [table] = lake_tables([CollectionRecord(6, "docs", encode_schema(CREATED), 1, ["v6"], ["p"])], storage)
    log = DeltaLog(table.uri, table.layout.insert_schema())
    log.commit(txns={"v6": 0}, expected={}, info={})
    assert views.as_stored(table, *_stored(log)) == (table, frozenset(table.layout.insert_schema().names))
    newer = with_fields(1)
    columns = CollectionLayout.from_proto(newer).insert_schema()
    log.commit(txns={"v6": 1}, expected={}, info={},
               schema=TableSchema(columns=columns, milvus_schema=newer.SerializeToString()))
    stored, present = views.as_stored(table, *_stored(log))
    assert [f.name for f in stored.layout.fields] == ["pk", "vec", "score", "label", "note"]
    assert present == frozenset(columns.names) and stored.schema == newer
    # A catalog as new as the table (a mirror's Milvus meta) keeps its own.
    [mirrored] = lake_tables([CollectionRecord(6, "docs", encode_schema(newer), 1, ["v6"], ["p"])], storage)
    assert views.as_stored(mirrored, *_stored(log))[0] == mirrored
    assert pa.types.is_float32(stored.layout.insert_schema().field("score").type)


def test_a_recorded_schema_that_does_not_decode_leaves_the_catalogs(tmp_path):
    storage = StorageLayout(str(tmp_path))
    [table] = lake_tables([CollectionRecord(7, "docs", encode_schema(CREATED), 1, ["v7"], ["p"])], storage)
    columns = frozenset(table.layout.insert_schema().names)
    assert views.as_stored(table, columns, {SCHEMA_KEY: "not base64 !"}) == (table, columns)


def test_a_json_fields_default_shows_where_the_table_holds_null():
    """Milvus's proxy fills a JSON field's default (``bytes_data``, the JSON text) into the rows sent
    without it, and its query answers it for the rows before the field: the view shows it there too.
    A Geometry's default (WKT, the table holding WKB) is not shown: the view reads null there."""
    schema = schema_pb2.CollectionSchema()
    schema.CopyFrom(CREATED)
    schema.version = 1
    schema.fields.add(fieldID=102, name="attrs", data_type=schema_pb2.DataType.JSON, nullable=True,
                      default_value=schema_pb2.ValueField(bytes_data=b'{"tier": "it\'s free"}'))
    schema.fields.add(fieldID=103, name="where", data_type=schema_pb2.DataType.Geometry, nullable=True,
                      default_value=schema_pb2.ValueField(string_data="POINT (1 2)"))
    assert views.default_literals(schema) == {"attrs": "CAST('{\"tier\": \"it\\'s free\"}' AS STRING)"}
