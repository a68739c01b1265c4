"""Spark SQL over the lake, as a user meets it: ``./spark-submit.sh sql`` end to end, README's readers
run as written, and a mirrored Milvus's collections (a database's too) as tables of a session.

One collection, ``demo`` (README's schema, 8 dimensions), is written by the real pipeline from the
proxy stand-in's inserts, deletes and an upsert (deletion vectors), and recorded in DeltaNode's
catalog in etcd; each reader is compared with DuckDB's answer on the same table and with the
current state by Milvus's rules (``current_rows``)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltanode.config import Conf
from deltanode.config.sections.pipeline import Limits, PipelineSettings, TriggerSettings
from deltanode.datacoord.catalog import CollectionRecord, catalog_prefix, encode_schema
from deltanode.delta.layout import TABLE_CONFIG, StorageLayout
from deltanode.etcd.client import EtcdClient
from deltanode.lake.spark import register_tables
from deltanode.lake.sql_command import QueryError, _query
from deltanode.lake.statements import writing_statement
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.pipeline.pipeline import Pipeline
from deltanode.state.current_state import current_rows
from deltanode.wire.etcdpb import DatabaseInfo
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.schema import CollectionLayout, schema_from_json

from ..delta_readers import by_duckdb, duckdb_connection
from .support import SCHEMA, Collection, settled_watermark, wait_until
from .test_milvus_catalog import _put_collection

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.spark


@dataclass(frozen=True)
class Lake:
    """The ``demo`` collection's table, the catalog that names it, and a conf file for both."""

    storage: StorageLayout
    collection_id: int
    conf: Path

    @property
    def uri(self) -> str:
        return self.storage.insert_log(self.collection_id)

    def current_pks(self) -> list[int]:
        return current_rows(self.storage, self.collection_id, "pk").column("pk").to_pylist()


@pytest.fixture(scope="module")
def lake(spark, broker, etcd_server, tmp_path_factory) -> Lake:
    tmp = tmp_path_factory.mktemp("lake")
    mq = Broker("kafka", broker.bootstrap_servers)
    storage = StorageLayout(str(tmp / "delta"))
    cid = int(time.time() * 1000) % 10**9
    pchannel = pchannel_name(f"lake{cid}-rootcoord-dml", 0)
    vchannel = vchannel_name(pchannel, cid, 0)
    mq.create_topics([pchannel])
    schema = schema_from_json(SCHEMA, "demo")
    proxy = Proxy(mq)
    producer = MilvusProducer(proxy, CollectionLayout.from_proto(schema), cid, "demo")
    stop = threading.Event()
    ticker(producer, [pchannel], stop)
    coll = Collection(cid, "demo", [pchannel], [vchannel], producer, storage, SCHEMA)
    settings = PipelineSettings(limits=Limits(), trigger=TriggerSettings(interval=0.2))
    pipe = Pipeline(spark.sparkContext, storage, mq, settings).start()
    try:
        coll.watch(pipe)
        first = producer.insert(pchannel, vchannel, 11, 3, 40)
        producer.insert(pchannel, vchannel, 11, 3, 30)
        producer.delete(pchannel, vchannel, 3, [first, first + 1, first + 7])
        producer.upsert(pchannel, vchannel, 12, 3, first + 10, 3)
        target = settled_watermark(coll, pchannel)
        wait_until(lambda: coll.committed_offset(vchannel) >= target, 90, "demo's rows to commit")
    finally:
        pipe.stop()
        stop.set()
        proxy.close()
    root = f"lake-{cid}/meta"
    with EtcdClient(etcd_server.endpoint) as client:
        record = CollectionRecord(cid, "demo", encode_schema(schema), 1, [vchannel], [pchannel])
        client.put(catalog_prefix(root) + str(cid), json.dumps(asdict(record)))
    conf = tmp / "lake.conf"
    conf.write_text(f"etcd.endpoints = {etcd_server.endpoint}\netcd.root = {root}\nstorage.root = {storage.root}\n"
                    "spark.driver.memory = 1g\nspark.ui.enabled = false\n")
    return Lake(storage, cid, conf)


def readme_block(fence: str, first_line: str) -> str:
    """The README block of ``Reading the current state`` that starts with ```fence and ``first_line``."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Reading the current state"):readme.index("## Commands")]
    start = section.index(f"```{fence}\n{first_line}")
    return section[start + len(fence) + 4:section.index("```", start + 3)]


def sql(lake: Lake, *command_lines: str) -> list[subprocess.CompletedProcess]:
    """README ``./spark-submit.sh sql`` lines run on the lake's conf as a user runs them, side by
    side: each starts a JVM of its own, which is mostly waiting on one core."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELTANODE_")}
    # spark-submit.sh packages app/ when it changed: once, before launchers race to write the zip.
    subprocess.run(["bash", str(ROOT / "build" / "package.sh"), "-q"], check=True, timeout=120)
    procs = []
    for line in command_lines:
        assert line.startswith("./spark-submit.sh sql --conf conf/standalone.conf "), line
        procs.append(subprocess.Popen(["bash", "-c", line.replace("conf/standalone.conf", str(lake.conf))], cwd=ROOT,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def json_lines(out: str) -> list[dict]:
    """stdout holds the rows and nothing else: every line a JSON object."""
    return [json.loads(line) for line in out.splitlines()]


def test_the_sql_subcommand_prints_the_current_rows_as_json_and_refuses_what_it_cannot_run(lake):
    lines = readme_block("bash", "./spark-submit.sh sql").strip().splitlines()
    with duckdb_connection() as con:
        count = con.execute(f"SELECT count(*) FROM delta_scan('{lake.uri}')").fetchone()[0]
        first_rows = con.execute(f"SELECT pk, title, vec FROM delta_scan('{lake.uri}') ORDER BY pk LIMIT 2").fetchall()
    assert count == len(lake.current_pks()) == 70 - 3

    t = time.monotonic()
    counted, listed, unknown, bad = sql(lake, *lines, './spark-submit.sh sql --conf conf/standalone.conf '
                                        '"SELECT * FROM nosuch"', './spark-submit.sh sql --conf conf/standalone.conf '
                                        '"SELEC pk FROM demo"')
    print(f"\nfour sql subcommands side by side: {time.monotonic() - t:.1f} s")
    assert counted.returncode == 0, counted.stderr[-3000:]
    assert json_lines(counted.stdout) == [{"n": count}]

    assert listed.returncode == 0, listed.stderr[-3000:]
    assert json_lines(listed.stdout) == [{"pk": pk, "title": title, "vec": vec} for pk, title, vec in first_rows]
    assert len(first_rows[0][2]) == 8 and first_rows[0][0] == min(lake.current_pks())

    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert "spark-submit.sh sql: no table `nosuch`: the tables are the collections, by name (demo)" in unknown.stderr

    assert (bad.returncode, bad.stdout) == (2, "")
    assert "spark-submit.sh sql: the query does not parse: [PARSE_SYNTAX_ERROR]" in bad.stderr


def test_readmes_readers_run_as_written(spark, lake, capsys):
    """README's Python readers, the PySpark session first, on the lake's table and conf: the
    snippet's session is the tests' one (``getOrCreate``), made by the same ``configure``."""
    code = readme_block("python", "path = ")
    for placeholder, value in (('"var/delta/insert_log/<collection_id>"', repr(lake.uri)),
                               ('load_conf("conf/standalone.conf")', f"load_conf({str(lake.conf)!r})"),
                               ('StorageLayout("var/delta")', f"StorageLayout({lake.storage.root!r})")):
        assert placeholder in code, placeholder
        code = code.replace(placeholder, value)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    pks = sorted(lake.current_pks())
    assert scope["spark"] is spark
    assert sorted(r.pk for r in spark.table("demo").collect()) == pks
    assert sorted(scope["rows"].column("pk").to_pylist()) == pks       # the last reader's: DeltaNode's own
    shown = capsys.readouterr().out
    assert f"|{len(pks)}|" in shown.replace(" ", "")                   # Spark's and DuckDB's count(*)


def test_a_mirrored_milvuss_collections_are_tables_a_databases_as_db_collection(spark, etcd_server, tmp_path):
    meta, root = f"mirror-{tmp_path.name}/milvus/meta", f"mirror-{tmp_path.name}/deltanode"
    storage = StorageLayout(str(tmp_path / "delta"))
    with EtcdClient(etcd_server.endpoint) as client:
        client.put(f"{meta}/root-coord/database/db-info/1", DatabaseInfo(id=1, name="default").SerializeToString())
        client.put(f"{meta}/root-coord/database/db-info/7", DatabaseInfo(id=7, name="shop").SerializeToString())
        _put_collection(client, meta, 445000000000000001, "docs")
        _put_collection(client, meta, 445000000000000002, "items", db=7)
    conf = Conf.from_dict({"etcd.endpoints": etcd_server.endpoint, "etcd.root": root, "milvus.meta.root": meta,
                           "storage.root": str(tmp_path / "delta")})
    layout = CollectionLayout.from_proto(schema_from_json(
        {"enable_dynamic_field": True, "fields": [{"name": "id", "data_type": "Int64", "is_primary_key": True},
                                                  {"name": "vec", "data_type": "FloatVector", "dim": 4}]}, "items"))
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4).tolist()
    write_deltalake(storage.insert_log(445000000000000002), pa.table(
        {"id": [1, 2, 3], "vec": vectors, "$meta": ['{"color": "red"}', None, "{}"], "_ts": [5, 6, 7],
         "_row_id": [1, 2, 3], "_segment_id": [9] * 3, "_partition_id": [8] * 3}, schema=layout.insert_schema()),
        configuration=TABLE_CONFIG)

    assert register_tables(spark, conf) == ["docs", "shop.items"]
    assert spark.table("docs").count() == 0                      # no Delta table yet: empty, its columns
    assert spark.table("docs").columns == ["id", "vec", "$meta", "_ts", "_row_id", "_segment_id", "_partition_id"]
    rows = spark.sql("SELECT id, vec, `$meta` FROM shop.items ORDER BY id").collect()
    assert [(r.id, r.vec, r["$meta"]) for r in rows] == [(1, vectors[0], '{"color": "red"}'), (2, vectors[1], None),
                                                          (3, vectors[2], "{}")]
    assert by_duckdb(storage.insert_log(445000000000000002), ["id"]).column("id").to_pylist() == [1, 2, 3]
    described = {r.col_name: r.comment for r in spark.sql("DESCRIBE shop.items").collect()}
    assert described["vec"] == "Milvus FloatVector, dim 4" and described["$meta"] == "Milvus JSON, dynamic field"
    with pytest.raises(KeyError, match=r"no collection named nope \(the tables: docs, shop.items\)"):
        register_tables(spark, conf, ["shop.items", "nope"])


def test_sql_runs_no_statement_that_writes(spark, lake, capsys):
    """Reads (queries, SHOW, DESCRIBE, EXPLAIN, a Delta table's history) run; writes and changes are
    refused before Spark runs them, with exit 2's message (in process: no JVM of its own)."""
    reads = ["SELECT * FROM demo", "WITH a AS (SELECT 1 AS x) SELECT * FROM a", "SHOW TABLES", "DESCRIBE demo",
             f"DESCRIBE HISTORY delta.`{lake.uri}`", f"EXPLAIN DELETE FROM delta.`{lake.uri}`", "VALUES (1)"]
    assert [writing_statement(spark, q) for q in reads] == [None] * len(reads)
    writes = {f"DELETE FROM delta.`{lake.uri}` WHERE pk > 0": "DeleteFromTable",
              "WITH a AS (SELECT 1 AS pk) INSERT INTO demo SELECT * FROM a": "InsertIntoStatement",
              f"VACUUM delta.`{lake.uri}`": "VacuumTableCommand",
              f"OPTIMIZE delta.`{lake.uri}`": "OptimizeTableCommand",
              f"RESTORE TABLE delta.`{lake.uri}` TO VERSION AS OF 1": "RestoreTableStatement",
              "CREATE TABLE x AS SELECT 1": "CreateTableAsSelect", "SET spark.sql.ansi.enabled = false": "SetCommand"}
    assert {q: writing_statement(spark, q) for q in writes} == writes
    version = len(list((Path(lake.uri) / "_delta_log").glob("*.json")))
    with pytest.raises(QueryError, match=r"would write or change something \(DeleteFromTable\): sql only reads"):
        _query(spark, Conf.from_dict({"storage.root": lake.storage.root}), [], next(iter(writes)), None)
    assert len(list((Path(lake.uri) / "_delta_log").glob("*.json"))) == version
