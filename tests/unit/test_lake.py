"""The lake's pieces without a JVM: table names from the catalogs' records, the views' SQL, the
Milvus types in column comments, the JSON of result rows, and the Spark options that bring Delta."""

from __future__ import annotations

import base64
import decimal
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql import types as T

from deltanode.config.jars import component_jars
from deltanode.config.spark_conf import with_delta_jars
from deltanode.datacoord.catalog import CollectionRecord, CollectionStatus, encode_schema
from deltanode.delta.layout import StorageLayout
from deltanode.lake import columns, spark, views
from deltanode.lake.rows_json import DuplicateColumn, RowRenderer
from deltanode.lake.tables import LakeTable, lake_tables, mentioned
from deltanode.wire.schema import CollectionLayout, schema_from_json

from ..milvus_rows import EVERY_TYPE

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                     {"name": "vec", "data_type": "FloatVector", "dim": 4}]}
DELTA_JARS = ",".join(str(p) for p in component_jars("delta"))


def record(cid: int, name: str, database: str = "default", state=CollectionStatus.CREATED,
           schema: dict = SCHEMA) -> CollectionRecord:
    return CollectionRecord(cid, name, encode_schema(schema_from_json(schema, name)), 1, [f"v{cid}"], ["p"],
                            state=state, database=database)


# --- tables ------------------------------------------------------------------------------------

def test_tables_are_named_after_live_collections_the_newest_of_a_name_and_db_collection_elsewhere(tmp_path):
    storage = StorageLayout(str(tmp_path))
    tables = lake_tables([record(1, "docs"), record(2, "gone", state=CollectionStatus.DROPPED),
                          record(3, "docs"), record(4, "items", database="shop"),
                          record(5, "draining", state=CollectionStatus.DROPPING), record(6, "docs", database="shop")],
                         storage)
    assert [(t.qualified, t.collection_id) for t in tables] == [
        ("docs", 3), ("draining", 5), ("shop.docs", 6), ("shop.items", 4)]
    assert tables[0].uri == storage.insert_log(3)
    assert [f.name for f in tables[0].layout.fields] == ["pk", "vec"]


def test_a_collection_deltanode_cannot_store_has_no_table(tmp_path, caplog):
    bad = record(1, "bad")
    schema = bad.schema
    del schema.fields[:]   # no primary key
    bad.schema_b64 = encode_schema(schema)
    assert lake_tables([bad, record(2, "good")], StorageLayout(str(tmp_path))) == \
        lake_tables([record(2, "good")], StorageLayout(str(tmp_path)))
    assert "collection bad (1) has no table" in caplog.text


def test_a_query_gets_the_tables_it_names_as_words_in_any_case(tmp_path):
    tables = lake_tables([record(1, "demo"), record(2, "demo2"), record(3, "items", database="shop"),
                          record(4, "other")], StorageLayout(str(tmp_path)))
    names = lambda q: [t.qualified for t in mentioned(tables, q)]  # noqa: E731
    assert names("SELECT count(*) FROM demo") == ["demo"]
    assert names("select * from `DEMO2` join shop.items") == ["demo2", "shop.items"]
    assert names("SELECT 1") == [] and names("SELECT * FROM demos") == []


# --- views and columns -------------------------------------------------------------------------

def every_type_table(tmp_path) -> LakeTable:
    return lake_tables([record(7, "every", schema=EVERY_TYPE)], StorageLayout(str(tmp_path)))[0]


def test_each_user_field_is_commented_with_its_milvus_type(tmp_path):
    layout = every_type_table(tmp_path).layout
    comments = {f.name: columns.comment(f) for f in layout.fields}
    assert comments["pk"] == "Milvus VarChar, primary key"
    assert comments["i16"] == "Milvus Int16, nullable"
    assert comments["i64"] == "Milvus Int64, partition key"
    assert comments["a_varchar"] == "Milvus Array of VarChar"
    assert comments["hv"] == "Milvus Float16Vector, dim 4"
    assert comments["$meta"] == "Milvus JSON, dynamic field"
    assert {f.name: columns.milvus_type({"comment": comments[f.name]}) for f in layout.fields} == \
        {f.name: f.type_name for f in layout.fields}
    assert columns.milvus_type({"comment": "a user's own"}) is None and columns.milvus_type({}) is None


def test_a_view_selects_every_column_by_name_with_its_comment_or_is_empty_before_a_commit(tmp_path):
    table = every_type_table(tmp_path)
    names = table.layout.insert_schema().names
    sql = views.view_statement(table, committed=True)
    assert sql.startswith("CREATE OR REPLACE TEMPORARY VIEW `every` (`pk` COMMENT 'Milvus VarChar, primary key', ")
    assert sql.endswith(f" FROM delta.`{table.uri}`") and "`$meta` COMMENT 'Milvus JSON, dynamic field'" in sql
    # i16's default shows where the table holds null (rows written before the field was added).
    selected = [f"COALESCE(`{n}`, CAST(7 AS SMALLINT))" if n == "i16" else f"`{n}`" for n in names]
    assert f"AS SELECT {', '.join(selected)} FROM" in sql
    empty = views.view_statement(table, committed=False)
    assert "CAST(NULL AS MAP<BIGINT, FLOAT>)" in empty and "CAST(NULL AS ARRAY<FLOAT>)" in empty
    assert "CAST(NULL AS BINARY)" in empty and empty.endswith(" WHERE false")
    assert empty.count("CAST(NULL AS") == len(names)
    elsewhere = LakeTable(name="it`s", database="shop", collection_id=1, uri="s3://b/x/insert_log/1",
                          layout=table.layout)
    sql = views.view_statement(elsewhere, committed=True)
    assert sql.startswith("CREATE OR REPLACE VIEW `shop`.`it``s` (") and sql.endswith("FROM delta.`s3a://b/x/insert_log/1`")


def test_a_table_is_committed_once_its_log_has_a_version(tmp_path):
    storage = StorageLayout(str(tmp_path))
    table = lake_tables([record(9, "t")], storage)[0]
    assert not views.committed(storage, table)
    (Path(table.uri) / "_delta_log").mkdir(parents=True)
    assert not views.committed(storage, table)
    (Path(table.uri) / "_delta_log" / f"{0:020d}.json").write_text("{}\n")
    assert views.committed(storage, table)


# --- rows as JSON ------------------------------------------------------------------------------

def field(name: str, data_type, milvus: str | None = None) -> T.StructField:
    return T.StructField(name, data_type, True, {"comment": f"Milvus {milvus}, dim 4"} if milvus else {})


def test_rows_print_vectors_as_milvus_returns_them_and_json_as_json():
    half = np.array([1.5, -2, 0.25, 65504], np.float16).tobytes()
    # bfloat16: the high half of each float32 (these four need no more bits)
    bfloat = b"".join(np.array([x], "<f4").tobytes()[2:] for x in (1.0, -0.5, 3.0, 0.15625))
    schema = T.StructType([
        field("fv", T.ArrayType(T.FloatType()), "FloatVector"), field("bv", T.BinaryType(), "BinaryVector"),
        field("hv", T.BinaryType(), "Float16Vector"), field("bf", T.BinaryType(), "BFloat16Vector"),
        field("sv", T.MapType(T.LongType(), T.FloatType()), "SparseFloatVector"), field("j", T.StringType(), "JSON"),
        field("$meta", T.StringType(), "JSON"), field("raw", T.BinaryType()), field("text", T.StringType()),
        field("n", T.DecimalType(10, 2)), field("nested", T.ArrayType(T.BinaryType())),
        field("s", T.StructType([field("b", T.BinaryType())])), field("nan", T.DoubleType())])
    renderer = RowRenderer(schema)
    values = [[0.5, 1.0], bytearray(b"\x01\xfe"), bytearray(half), bytearray(bfloat), {3: 0.5, 10: 2.0},
              '{"a": [1, {"b": null}]}', '{"color": "red"}', bytearray(b"\x00\xff"), '{"not": "parsed"}',
              decimal.Decimal("12.50"), [bytearray(b"x")], Row(b=bytearray(b"y")), float("nan")]
    line = renderer.render(values)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "fv": [0.5, 1.0], "bv": [1, 254], "hv": [1.5, -2.0, 0.25, 65504.0], "bf": [1.0, -0.5, 3.0, 0.15625],
        "sv": {"3": 0.5, "10": 2.0}, "j": {"a": [1, {"b": None}]}, "$meta": {"color": "red"},
        "raw": base64.b64encode(b"\x00\xff").decode(), "text": '{"not": "parsed"}', "n": 12.5,
        "nested": [base64.b64encode(b"x").decode()], "s": {"b": base64.b64encode(b"y").decode()}, "nan": None}
    assert set(json.loads(renderer.render([None] * len(values))).values()) == {None}


def test_a_json_field_that_is_not_json_stays_text_and_two_columns_of_one_name_are_refused():
    renderer = RowRenderer(T.StructType([field("j", T.StringType(), "JSON")]))
    assert json.loads(renderer.render(Row(j="{broken"))) == {"j": "{broken"}
    with pytest.raises(DuplicateColumn, match="more than one column named pk"):
        RowRenderer(T.StructType([field("pk", T.LongType()), field("pk", T.LongType())]))


# --- Spark options -----------------------------------------------------------------------------

def test_the_delta_jars_join_the_confs_and_the_sql_settings_keep_the_users():
    assert with_delta_jars({}) == {"spark.jars": DELTA_JARS}
    assert with_delta_jars({"spark.jars": "/a.jar", "x": "1"}) == {"spark.jars": f"/a.jar,{DELTA_JARS}", "x": "1"}
    assert with_delta_jars({"spark.jars": DELTA_JARS}) == {"spark.jars": DELTA_JARS}   # each once
    options = spark.with_delta_sql({"spark.sql.extensions": "my.Ext", "spark.databricks.delta.snapshotPartitions": "8"})
    assert options == {"spark.jars": DELTA_JARS, "spark.sql.extensions": f"my.Ext,{spark.EXTENSION}",
                       "spark.sql.catalog.spark_catalog": spark.CATALOG,
                       "spark.databricks.delta.snapshotPartitions": "8"}


def test_configure_sets_a_builder_without_starting_a_jvm():
    # The whole suite runs the integration tests' session first: configure must leave whatever is there.
    before = SparkSession.getActiveSession()
    builder = spark.configure(SparkSession.builder.config("spark.jars", "/mine.jar").appName("x"))
    assert builder._options["spark.jars"] == f"/mine.jar,{DELTA_JARS}"
    assert builder._options["spark.sql.extensions"] == spark.EXTENSION
    assert builder._options["spark.sql.catalog.spark_catalog"] == spark.CATALOG
    assert builder._options["spark.app.name"] == "x"
    assert SparkSession.getActiveSession() is before


def test_the_readmes_options_for_any_spark_are_configures():
    """README's ``pyspark --jars ... --conf ...`` gives what ``configure`` sets (the tests' sessions
    are made with ``configure``)."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index(".venv/bin/pyspark --jars"):]
    command = block[:block.index("```")].replace("\\\n", " ").removeprefix(".venv/bin/pyspark").strip()
    words = subprocess.run(["bash", "-c", f"set -- {command}; printf '%s\\n' \"$@\""], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert words[0] == "--jars" and words[2::2] == ["--conf", "--conf"]
    assert ",".join(str(ROOT / j) for j in words[1].split(",")) == DELTA_JARS
    wanted = spark.with_delta_sql({})
    assert dict(w.split("=", 1) for w in words[3::2]) == {k: wanted[k] for k in ("spark.sql.extensions",
                                                                                 "spark.sql.catalog.spark_catalog")}


def test_sql_help_starts_no_jvm_and_imports_no_spark():
    code = ("import sys; from deltanode.cli import main; rc = main(['sql', '--help']); "
            "bad = [m for m in sys.modules if m.startswith(('pyspark', 'py4j', 'deltanode.lake.sql_command'))]; "
            "assert rc == 0 and not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "app", capture_output=True, text=True, timeout=30,
                       env={k: v for k, v in os.environ.items() if not k.startswith("DELTANODE_")})
    assert r.returncode == 0, r.stderr
    assert "usage: spark-submit.sh sql" in r.stdout and "QUERY" in r.stdout


def test_layouts_of_every_type_have_a_spark_type_for_each_column(tmp_path):
    layout: CollectionLayout = every_type_table(tmp_path).layout
    assert {views.sql_type(f.type) for f in layout.insert_schema()} >= {
        "STRING", "BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "BINARY", "ARRAY<FLOAT>",
        "ARRAY<STRING>", "MAP<BIGINT, FLOAT>"}
