"""storage.root on S3 through a proxy that breaks requests (s3_fault_proxy.py): commits whose PUT
S3 stored but whose answer was lost, 503s, resets and slow answers, on data files and commits.
Every produced row is counted afterwards, as a multiset, and every file a committed version names
must be in the bucket."""

from __future__ import annotations

import collections
import itertools
import json
import logging
import threading
import time

import pyarrow as pa
import pyarrow.parquet
import pytest
from deltalake import DeltaTable

from deltanode.delta.delta_log import CommitInDoubt, DeltaLog, TxnMoved
from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import StoreOptions, bucket_and_key
from deltanode.delta.tables import read_table
from deltanode.mq.milvus_producer import ticker

from .s3_fault_proxy import Fault, FaultyS3, Rule, faulty_s3
from .support import fresh_root, settled_watermark

PK_SCHEMA = pa.schema([("pk", pa.int64())])
COMMIT_PUT = r"/_delta_log/\d{20}\.json$"
SEED = 60
FAULTS_ON = 75   # seconds the schedule has to inject every required fault
CATCH_UP = 90   # seconds the pipeline has to reach the watermarks once the faults stop


@pytest.fixture
def s3_faulty(s3):
    """The S3 server behind a fault proxy of this test's own: DeltaNode gets ``.options``."""
    with faulty_s3(s3) as faulty:
        yield faulty


def _version_key(n: int) -> str:
    return rf"/_delta_log/{n:020d}\.json$"


def _log_versions(options: StoreOptions, uri: str) -> dict[int, list[dict]]:
    """Every version file of the table's log, read from the S3 server itself (not the proxy)."""
    bucket, prefix = bucket_and_key(uri)
    client = options.boto3()
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/_delta_log/"):
        for obj in page.get("Contents", []):
            name = obj["Key"].rsplit("/", 1)[1]
            if name.endswith(".json") and name[:-5].isdigit():
                body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                out[int(name[:-5])] = [json.loads(line) for line in body.splitlines() if line.strip()]
    return out


def _carrying(versions: dict[int, list[dict]], marker: str) -> list[int]:
    """The versions whose commitInfo carries ``marker``."""
    return sorted(v for v, lines in versions.items()
                  if any(line.get("commitInfo", {}).get("attempt") == marker for line in lines))


@pytest.mark.parametrize("fault", [Fault.LOST_ANSWER, Fault.RESET_AFTER])
def test_a_commit_s3_stored_but_did_not_answer_lands_once_as_its_own(s3_faulty: FaultyS3, fault):
    """The commit PUT of version 1 reaches S3, which stores it; the client gets a 500 or a reset,
    botocore sends the PUT again and gets 412. The commit is the writer's own: it returns version
    1, and no version holds it twice."""
    uri = StorageLayout(fresh_root("lost-answer"), s3_faulty.options).insert_log(1)
    log = DeltaLog(uri, PK_SCHEMA, s3_faulty.options)
    s3_faulty.proxy.add(Rule(fault=fault, key=_version_key(1), times=1))
    try:
        version = log.commit(txns={"a": 2}, expected={"a": None}, info={"attempt": "mine"})
    finally:
        print(s3_faulty.proxy.report())
    puts = [(e.fault, e.upstream) for e in s3_faulty.proxy.exchanges
            if e.method == "PUT" and e.path.endswith(f"{1:020d}.json")]
    # The fault as meant: the first PUT stored, its answer lost; any PUT after it (botocore's
    # retry) refused with 412, the object already there.
    assert puts[0] == (fault, 200) and all(status == 412 for _, status in puts[1:]), puts
    assert version == 1 and log.version == 1
    versions = _log_versions(s3_faulty.direct, uri)
    assert sorted(versions) == [0, 1] and _carrying(versions, "mine") == [1]
    table = DeltaTable(uri, storage_options=s3_faulty.direct.delta_rs())
    assert table.version() == 1 and table.transaction_version("a") == 2
    # The log goes on from there: its next commit is version 2, once.
    assert log.commit(txns={"a": 3}, expected={"a": 2}, info={"attempt": "next"}) == 2
    assert _carrying(_log_versions(s3_faulty.direct, uri), "next") == [2]


def test_a_competing_writer_is_still_refused_through_lost_answers(s3_faulty: FaultyS3):
    """Another writer took version 1 and moved txn ``a``: a commit that expected ``a`` unmoved
    is refused even when its own PUT's answer is lost (a 500, then 412 on botocore's retry, for a
    version that is not its own); a commit of another app id lands at version 2, once, through
    the same fault."""
    uri = StorageLayout(fresh_root("competing"), s3_faulty.options).insert_log(1)
    mine = DeltaLog(uri, PK_SCHEMA, s3_faulty.options)
    other = DeltaLog(uri, options=s3_faulty.direct)
    assert other.commit(txns={"a": 1}, expected={"a": None}, info={"attempt": "other"}) == 1
    s3_faulty.proxy.add(Rule(fault=Fault.LOST_ANSWER, key=_version_key(1), times=1),
                        Rule(fault=Fault.LOST_ANSWER, key=_version_key(2), times=1))
    try:
        with pytest.raises(TxnMoved) as refused:
            mine.commit(txns={"a": 5}, expected={"a": None}, info={"attempt": "stale"})
        assert refused.value.moved == {"a": 1}
        version = mine.commit(txns={"b": 1}, expected={"b": None}, info={"attempt": "mine"})
    finally:
        print(s3_faulty.proxy.report())
    lost = s3_faulty.proxy.injected(Fault.LOST_ANSWER)
    assert [(e.path.rsplit("/", 1)[1], e.upstream) for e in lost] == \
        [(f"{1:020d}.json", 412), (f"{2:020d}.json", 200)]
    assert version == 2
    versions = _log_versions(s3_faulty.direct, uri)
    assert sorted(versions) == [0, 1, 2]
    assert (_carrying(versions, "other"), _carrying(versions, "stale"), _carrying(versions, "mine")) == ([1], [], [2])
    table = DeltaTable(uri, storage_options=s3_faulty.direct.delta_rs())
    assert (table.transaction_version("a"), table.transaction_version("b")) == (1, 1)


def test_a_commit_the_store_fails_throughout_is_in_doubt_then_found_as_its_own(s3_faulty: FaultyS3):
    """Every PUT of version 1 is answered 500 (the first stored it, the others got 412 behind the
    500) and every read of it refused with 503: the commit raises CommitInDoubt, though it landed,
    once. Once S3 answers again, the log reads version 1 as this object's own commit: a commit
    expecting the txn unmoved is refused as moved by its own earlier commit, not another writer's."""
    uri = StorageLayout(fresh_root("in-doubt"), s3_faulty.options).insert_log(1)
    log = DeltaLog(uri, PK_SCHEMA, s3_faulty.options)
    s3_faulty.proxy.add(Rule(name="put", fault=Fault.LOST_ANSWER, key=_version_key(1), times=None),
                        Rule(name="read back", fault=Fault.REFUSE, method="GET", key=_version_key(1), times=None,
                             after="put"))
    try:
        with pytest.raises(CommitInDoubt):
            log.commit(txns={"a": 1}, expected={"a": None}, info={"attempt": "mine"})
    finally:
        print(s3_faulty.proxy.report().splitlines()[0])
    puts = [e.upstream for e in s3_faulty.proxy.injected(Fault.LOST_ANSWER)]
    assert puts[0] == 200 and set(puts[1:]) == {412}, puts
    assert s3_faulty.proxy.injected(Fault.REFUSE, method="GET"), "no read-back refused"
    assert _carrying(_log_versions(s3_faulty.direct, uri), "mine") == [1]
    s3_faulty.proxy.clear()
    with pytest.raises(TxnMoved) as moved:
        log.commit(txns={"a": 1}, expected={"a": None}, info={"attempt": "again"})
    assert moved.value.own_late and moved.value.moved == {"a": 1}
    versions = _log_versions(s3_faulty.direct, uri)
    assert sorted(versions) == [0, 1] and _carrying(versions, "again") == []


# Faults on what delta-rs writes and lists for DeltaNode: the checkpoint every 100 versions (its
# parquet file and ``_last_checkpoint``, PUT by delta-rs's object store on the checkpoint thread)
# and the LIST requests behind every open of a table.
CHECKPOINT_RULES = (
    Rule(name="checkpoint stored, answer lost", fault=Fault.LOST_ANSWER, key=r"\.checkpoint\.parquet$"),
    Rule(name="last checkpoint stored, reset", fault=Fault.RESET_AFTER, key=r"/_last_checkpoint$"),
    Rule(name="checkpoint 503", fault=Fault.REFUSE, key=r"\.checkpoint\.parquet$", skip=1),
    Rule(name="list 503", fault=Fault.REFUSE, method="GET", key=r"^/[^/]+/?$", query="list-type=2", times=6,
         probability=0.5, seed=SEED),
)


def _last_checkpoint(options: StoreOptions, uri: str) -> dict | None:
    bucket, prefix = bucket_and_key(uri)
    try:
        body = options.boto3().get_object(Bucket=bucket, Key=f"{prefix}/_delta_log/_last_checkpoint")["Body"]
    except Exception:   # noqa: BLE001 - botocore's NoSuchKey: none written yet
        return None
    return json.loads(body.read())


def test_checkpoints_and_listings_broken_leave_every_version_once_and_the_table_readable(s3_faulty: FaultyS3,
                                                                                         caplog):
    """250 commits through the proxy while the checkpoints asked for at 100 and 200 have their
    PUTs stored but unanswered, reset or refused, and LIST requests answer 503: every version is
    in the log once, each open of the table (delta-rs's and DeltaNode's own, which list the log)
    gets the newest version, and ``_last_checkpoint`` only ever names a checkpoint that is whole."""
    uri = StorageLayout(fresh_root("checkpoint-faults"), s3_faulty.options).insert_log(1)
    log = DeltaLog(uri, PK_SCHEMA, s3_faulty.options)
    s3_faulty.proxy.add(*CHECKPOINT_RULES)
    try:
        for n in range(1, 251):
            assert log.commit(txns={"a": n}, expected={"a": n - 1 or None}, info={"attempt": f"c{n}"}) == n
        # A checkpoint is of the version the table has when the checkpoint thread gets to it.
        assert _poll(lambda: (_last_checkpoint(s3_faulty.direct, uri) or {}).get("version", 0) >= 200
                     or any("checkpoint of" in r.getMessage() for r in caplog.records), 60, 0.5), \
            "the checkpoint asked for at version 200 neither landed nor failed in 60 s"
        opened = [DeltaLog.open(uri, s3_faulty.options) for _ in range(3)]   # through the LIST faults
        tables = [DeltaTable(uri, storage_options=s3_faulty.options.delta_rs()) for _ in range(3)]
    finally:
        print(s3_faulty.proxy.report())
    fired = collections.Counter(e.rule for e in s3_faulty.proxy.exchanges if e.rule)
    assert all(fired[r.label] for r in CHECKPOINT_RULES), fired
    versions = _log_versions(s3_faulty.direct, uri)
    assert sorted(versions) == list(range(251))
    assert [_carrying(versions, f"c{n}") for n in range(1, 251)] == [[n] for n in range(1, 251)]
    assert all(o is not None and o.version == 250 and o.txn("a") == 250 for o in opened)
    assert all(t.version() == 250 and t.transaction_version("a") == 250 for t in tables)
    last = _last_checkpoint(s3_faulty.direct, uri)
    failed = [r.getMessage() for r in caplog.records if "checkpoint of" in r.getMessage()]
    print(f"_last_checkpoint {last}; checkpoint failures logged: {failed}")
    if last is not None:   # what it names is whole: delta-rs reads the table from it, at any version after
        bucket, prefix = bucket_and_key(uri)
        key = f"{prefix}/_delta_log/{last['version']:020d}.checkpoint.parquet"
        body = s3_faulty.direct.boto3().get_object(Bucket=bucket, Key=key)["Body"].read()
        assert pa.parquet.read_table(pa.BufferReader(body)).num_rows == last["size"]
        fresh = DeltaTable(uri, version=last["version"], storage_options=s3_faulty.direct.delta_rs())
        assert fresh.transaction_version("a") == last["version"]


# The seeded schedule of the pipeline test: every kind of fault on the executors' data files
# (insert and delete binlogs, parquet) and on the driver's commit PUTs, firing at random among
# the requests each rule matches, a bounded number of times (each client's retries outlast it).
# And one insert commit in doubt, first (the first rule that wants a request breaks it): every
# PUT of its version answered 500 and, from the first on, every read of it refused, until the
# node gives up on it (CommitInDoubt: its vchannels fail, keeping their files); then S3 answers
# for it again and the node reloads from the version that landed.
PARQUET = r"\.parquet$"
INSERT_COMMIT = r"/insert_log/\d+" + COMMIT_PUT
DELETE_COMMIT = r"/delta_log/\d+" + COMMIT_PUT
IN_DOUBT = ("insert commit in doubt", "insert commit read back refused")
IN_DOUBT_VERSION = r"/insert_log/\d+" + _version_key(6)
SCHEDULE = (
    Rule(name=IN_DOUBT[0], fault=Fault.LOST_ANSWER, key=IN_DOUBT_VERSION, times=None),
    Rule(name=IN_DOUBT[1], fault=Fault.REFUSE, method="GET", key=IN_DOUBT_VERSION, times=None, after=IN_DOUBT[0]),
    Rule(name="data lost answer", fault=Fault.LOST_ANSWER, key=PARQUET, times=4, probability=0.15, seed=SEED),
    Rule(name="data 503", fault=Fault.REFUSE, key=PARQUET, times=4, probability=0.15, seed=SEED + 1),
    Rule(name="data reset before", fault=Fault.RESET_BEFORE, key=PARQUET, times=2, probability=0.1, seed=SEED + 2),
    Rule(name="data reset after", fault=Fault.RESET_AFTER, key=PARQUET, times=2, probability=0.1, seed=SEED + 3),
    Rule(name="data upload completed, answer lost", fault=Fault.LOST_ANSWER, method="POST", key=PARQUET,
         query="uploadId=", times=2, probability=0.15, seed=SEED + 4),
    Rule(name="data slow", fault=Fault.SLOW, key=PARQUET, times=3, probability=0.1, seconds=1.5, seed=SEED + 5),
    Rule(name="insert commit lost answer", fault=Fault.LOST_ANSWER, key=INSERT_COMMIT, skip=2, times=3,
         probability=0.3, seed=SEED + 6),
    Rule(name="insert commit reset after", fault=Fault.RESET_AFTER, key=INSERT_COMMIT, skip=4, times=1,
         probability=0.3, seed=SEED + 7),
    Rule(name="insert commit 503", fault=Fault.REFUSE, key=INSERT_COMMIT, times=2, probability=0.2, seed=SEED + 8),
    Rule(name="insert commit slow", fault=Fault.SLOW, key=INSERT_COMMIT, times=2, probability=0.2, seconds=1.0,
         seed=SEED + 9),
    Rule(name="delete commit lost answer", fault=Fault.LOST_ANSWER, key=DELETE_COMMIT, skip=1, times=1,
         probability=0.5, seed=SEED + 10),
    Rule(name="log read 503", fault=Fault.REFUSE, method="GET", key=r"/_delta_log/", times=3, probability=0.05,
         seed=SEED + 11),
)
# Rules that must have fired for the run to prove anything (the others fire when the seed says).
REQUIRED = (*IN_DOUBT, "data lost answer", "data 503", "data upload completed, answer lost",
            "insert commit lost answer", "delete commit lost answer")


def _missing_files(direct: StoreOptions, uri: str) -> tuple[int, list[str]]:
    """How many files the table's committed versions name (every ``add`` of every version, and
    the deletion-vector files they point to), and those of them not in the bucket. Nothing in
    these tests compacts or drops: no file a version names may ever be deleted."""
    bucket, prefix = bucket_and_key(uri)
    named = set()
    for lines in _log_versions(direct, uri).values():
        for line in lines:
            add = line.get("add")
            if add is None:
                continue
            named.add(add["path"])
            dv = add.get("deletionVector")
            assert dv is None or dv["storageType"] == "i", f"a DV file: {dv}; check it exists too"
    keys = {o["Key"].removeprefix(f"{prefix}/") for page in direct.boto3().get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{prefix}/") for o in page.get("Contents", [])}
    return len(named), sorted(named - keys)


@pytest.mark.spark
def test_the_pipeline_through_a_faulty_s3_keeps_every_row_exactly_once(spark, mq, make_collection, s3_faulty,
                                                                        caplog):
    """Two vchannels insert and delete while the schedule breaks data-file and commit requests;
    then the faults stop and every checkpoint reaches its watermark: every row once, deletes
    applied, every committed file in the bucket, every table readable."""
    from deltanode.config.sections.pipeline import CompactionSettings, Limits, PipelineSettings, TriggerSettings
    from deltanode.pipeline.pipeline import Pipeline

    proxy = s3_faulty.proxy
    caplog.set_level(logging.DEBUG, logger="deltanode.pipeline")   # a vchannel failed for the store says so at DEBUG
    storage = StorageLayout(fresh_root("faults"), s3_faulty.options)
    direct = StorageLayout(storage.root, s3_faulty.direct)   # the checks read S3 itself
    coll = make_collection(shards=2, ticking=False)   # ticked below, once a second
    insert_uri, delete_uri = storage.insert_log(coll.collection_id), storage.delta_log(coll.collection_id)
    produced: list[int] = []
    deleted: list[int] = []
    previous: dict[int, int] = {}   # shard -> first key of its previous insert

    round_numbers = itertools.count()

    def produce(rounds: int) -> None:
        for _ in range(rounds):
            r = next(round_numbers)
            for k, (p, v) in enumerate(zip(coll.pchannels, coll.vchannels)):
                first = coll.producer.insert(p, v, segment_id=60 + k, partition_id=1, rows=40)
                produced.extend(range(first, first + 40))
                if r % 2 and k in previous:   # two rows of the shard's previous insert: deletion vectors
                    gone = [previous[k] + 3, previous[k] + 17]
                    coll.producer.delete(p, v, 1, gone)
                    deleted.extend(gone)
                previous[k] = first
            coll.producer.flush_producer()
            time.sleep(0.3)

    # Read version by version as they land (not a delta-rs open of the whole log per poll: the S3
    # server serves one request at a time, the pipeline's among them).
    committed = DeltaLog.follow(insert_uri, s3_faulty.direct)

    def checkpoints() -> dict[str, int]:
        committed.refresh()
        return {v: committed.txn(v) or 0 for v in coll.vchannels}

    def required_fired() -> bool:
        """Every required rule fired, and the commit in doubt was given up by the node (then S3
        answers for its version again)."""
        if not any("CommitInDoubt" in r.getMessage() for r in caplog.records):
            return False
        proxy.clear(*IN_DOUBT)
        fired = collections.Counter(e.rule for e in proxy.exchanges)
        return all(fired[name] for name in REQUIRED)

    ticks = threading.Event()
    ticker(coll.producer, coll.pchannels, ticks, interval=1.0)
    proxy.add(*SCHEDULE)
    pipe = Pipeline(spark.sparkContext, storage, mq,
                    PipelineSettings(limits=Limits(max_messages=16), trigger=TriggerSettings(interval=0.2),
                                     compaction=CompactionSettings(interval=0))).start()
    started = time.monotonic()
    try:
        for v in coll.vchannels:
            coll.watch(pipe, v)
        produce(16)
        while not required_fired():   # more traffic until every required fault has been injected
            assert time.monotonic() < started + FAULTS_ON, \
                f"the schedule did not inject {REQUIRED} and a commit in doubt in {FAULTS_ON} s"
            produce(1)
        proxy.clear()
        faults_off = time.monotonic()
        produce(4)
        targets = {v: settled_watermark(coll, p) for p, v in zip(coll.pchannels, coll.vchannels)}
        reached = _poll(lambda: all(n >= targets[v] for v, n in checkpoints().items()), CATCH_UP)
        caught_up = time.monotonic() - faults_off
        print(f"checkpoints {checkpoints()}, targets {targets}")
        store_back = _poll(lambda: pipe.store_reachability.down_since is None, 30)
    finally:
        print(proxy.report())
        pipe.stop()
        ticks.set()
    assert proxy.injected(Fault.LOST_ANSWER, INSERT_COMMIT)[0].upstream == 200, "no commit PUT stored and unanswered"

    # The files first: a file a committed version names and the bucket lacks explains what follows.
    named_inserts, missing_inserts = _missing_files(s3_faulty.direct, insert_uri)
    named_deletes, missing_deletes = _missing_files(s3_faulty.direct, delete_uri)
    missing = missing_inserts + missing_deletes
    deleted_by_node = [e for e in proxy.exchanges if e.method == "DELETE" and e.path.endswith(tuple(missing))]
    assert not missing, (
        f"committed versions name files that are not in the bucket: {len(missing_inserts)} of {named_inserts} "
        f"insert binlogs, {len(missing_deletes)} of {named_deletes} delete binlogs, e.g. {missing[:3]}; "
        f"DeltaNode deleted {len(deleted_by_node)} of them through the proxy")
    assert reached, f"the checkpoints did not reach the watermarks {CATCH_UP} s after the faults stopped"
    # The store's outage was told for the node (not a line per vchannel), and its end once it answered.
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "flowgraph failed" in
            r.getMessage() and "StoreUnreachable" in r.getMessage()]
    assert not told, told[:3]
    assert any(r.getMessage().startswith("object storage unreachable at ") for r in caplog.records)
    assert store_back, f"the object store's outage did not end: {pipe.store_reachability.describe()}"
    for uri in (insert_uri, delete_uri):   # every table opens in delta-rs and lists its files
        assert DeltaTable(uri, storage_options=s3_faulty.direct.delta_rs()).file_uris()

    rows = read_table(direct, insert_uri, ["pk"], include_deleted=True).column("pk").to_pylist()
    extra = collections.Counter(rows) - collections.Counter(produced)
    lost = collections.Counter(produced) - collections.Counter(rows)
    current = read_table(direct, insert_uri, ["pk"]).column("pk").to_pylist()
    deletes = read_table(direct, delete_uri, ["pk"]).column("pk").to_pylist()
    print(f"S3 through the fault proxy: produced {len(produced)} rows, {len(rows)} in the insert table "
          f"({sum(extra.values())} extra, {sum(lost.values())} lost); {len(deleted)} deleted, {len(deletes)} in the "
          f"delete table, {len(current)} rows in the current state; {named_inserts} insert and {named_deletes} delete "
          f"binlogs committed, all in the bucket; {time.monotonic() - started:.0f} s in all, caught up "
          f"{caught_up:.0f} s after the faults stopped")
    assert collections.Counter(rows) == collections.Counter(produced)
    assert collections.Counter(deletes) == collections.Counter(deleted)
    assert collections.Counter(current) == collections.Counter(produced) - collections.Counter(deleted)


def _poll(predicate, timeout: float, interval: float = 1.0) -> bool:
    """Whether ``predicate`` held within ``timeout``, polled every ``interval``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
