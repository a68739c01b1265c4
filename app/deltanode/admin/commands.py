"""``./spark-submit.sh admin ...``: each command prints JSON on stdout and returns an exit code.

Each command takes the ``Conf`` the command line loaded and reads it through ``Settings``."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from google.protobuf.message import DecodeError

from ..config import Conf
from ..config.settings import Settings
from ..datacoord.catalog import (
    CatalogError,
    CollectionRecord,
    CollectionStatus,
    NewCollection,
    create_collections,
    find_record,
)
from ..datacoord.catalog_of_conf import open_catalog
from ..datacoord.milvus_catalog import read_gaps
from ..datanode.status import read_statuses
from ..delta.delta_log import DeltaLog
from ..delta.layout import StorageLayout
from ..etcd import flush_request, keys
from ..etcd.client import EtcdClient
from ..etcd.errors import EtcdError
from ..etcd.reachability import describe_outage
from ..etcd.session import list_sessions
from ..failure.errors import DeltaNodeError
from ..milvus_import.import_progress import import_progress, summary
from ..mq.broker import Broker, BrokerError
from ..mq.reachability import describe_broker_outage
from ..state import meta
from ..state.channel_state import SegmentState
from ..wire.datapb import ChannelWatchInfo, ChannelWatchState
from ..wire.milvus_proto import schema_pb2
from ..wire.positions import now_ts
from ..wire.schema import FIRST_USER_FIELD_ID, DataType, SchemaError, load_schema_file


def _print(doc) -> None:
    json.dump(doc, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def _fail(message: str) -> int:
    print(f"admin: {message}", file=sys.stderr)
    return 1


def _client(settings: Settings) -> EtcdClient:
    return EtcdClient(settings.etcd.endpoints, security=settings.etcd.security)


def _records(settings: Settings, client: EtcdClient) -> list[CollectionRecord]:
    """The collections of the conf's catalog (DeltaNode's, or the mirrored Milvus's)."""
    catalog = open_catalog(settings, client)
    try:
        return catalog.collections()
    finally:
        catalog.close()


def _refuse_in_mirror_mode(settings: Settings, what: str) -> str | None:
    """Why ``what`` cannot be done against a mirrored Milvus (None outside mirror mode)."""
    root = settings.mirror.meta_root
    if root is None:
        return None
    return (f"{what}: the collections are mirrored from the Milvus whose meta is at {root} (milvus.meta.root); "
            f"DeltaNode only reads that Milvus's meta and channels: do this through Milvus (pymilvus)")


def create_collection(conf: Conf, args: argparse.Namespace) -> int:
    settings = Settings.of(conf)
    if (why := _refuse_in_mirror_mode(settings, "create-collection")) is not None:
        return _fail(why)
    if args.count < 1:
        return _fail(f"--count must be at least 1, got {args.count}")
    names = [args.name] if args.count == 1 else [f"{args.name}_{i}" for i in range(args.count)]
    try:
        schema = load_schema_file(args.schema, names[0])
        new = [NewCollection(name=name, schema=_renamed(schema, name), shards=args.shards) for name in names]
        with _client(settings) as client:
            records = create_collections(client, settings.etcd.root, Broker.of(settings.broker), new,
                                         settings.pchannels.prefix, settings.pchannels.count)
    except (SchemaError, CatalogError, EtcdError, ValueError) as e:
        return _fail(str(e))
    docs = [{"name": r.name, "collection_id": r.collection_id, "vchannels": r.vchannels, "pchannels": r.pchannels}
            for r in records]
    _print(docs[0] if args.count == 1 else docs)
    return 0


def _renamed(schema: schema_pb2.CollectionSchema, name: str) -> schema_pb2.CollectionSchema:
    out = schema_pb2.CollectionSchema()
    out.CopyFrom(schema)
    out.name = name
    return out


def _watch_keys(client: EtcdClient, root: str) -> dict[str, tuple[str, ChannelWatchInfo]]:
    """vchannel -> (node, ChannelWatchInfo) for every channel watch key."""
    out = {}
    prefix = keys.channel_watch_root(root)
    for key, value, _ in client.get_prefix(prefix):
        node, _, vchannel = key[len(prefix):].partition("/")
        try:
            out[vchannel] = (node, ChannelWatchInfo.FromString(value))
        except DecodeError:  # a foreign or corrupt value: show it as such
            out[vchannel] = (node, ChannelWatchInfo())
    return out


def show_channels(conf: Conf, args: argparse.Namespace) -> int:
    settings = Settings.of(conf)
    storage = StorageLayout.of(settings.storage)
    try:
        with _client(settings) as client:
            watches = _watch_keys(client, settings.etcd.root)
            records = _records(settings, client)
    except EtcdError as e:
        return _fail(str(e))
    rows = []
    for record in records:
        for vchannel in record.vchannels:
            node, info = watches.get(vchannel, (None, None))
            state = meta.channel_state(storage, record.collection_id, vchannel)
            rows.append({
                "vchannel": vchannel, "collection": record.name, "collection_id": record.collection_id,
                "node_id": int(node) if node and node.isdigit() else None,
                "state": ("Unassigned" if info is None
                          else "Parked" if node in (keys.BUFFER_NODE, keys.LEGACY_REMAINING)
                          else ChannelWatchState.name(info.state)),
                "checkpoint_ts": state.checkpoint_ts if state else None,
                "checkpoint_offset": state.checkpoint_offset if state else None,
                "collection_dropped": bool(state and state.collection_dropped),
            })
    _print(rows)
    return 0


class AdminError(DeltaNodeError):
    """A request that cannot be answered; the message goes to stderr."""


def _collection(settings: Settings, name_or_id: str) -> CollectionRecord:
    try:
        with _client(settings) as client:
            record = find_record(_records(settings, client), name_or_id)
    except EtcdError as e:
        raise AdminError(str(e)) from None
    if record is None:
        raise AdminError(f"no collection named {name_or_id!r}")
    return record


def show_collections(conf: Conf, args: argparse.Namespace) -> int:
    """Every collection of the catalog (in mirror mode: of the Milvus), with what DeltaNode made of it."""
    settings = Settings.of(conf)
    storage = StorageLayout.of(settings.storage)
    try:
        with _client(settings) as client:
            records = _records(settings, client)
            gaps = read_gaps(client, settings.etcd.root)
    except (EtcdError, CatalogError) as e:
        return _fail(str(e))
    rows = []
    for record in records:
        insert_log = DeltaLog.open(storage.insert_log(record.collection_id), storage.options)
        states = [meta.channel_state_in(insert_log, v) if insert_log else None for v in record.vchannels]
        imports = {v: summary(doc) for v in record.vchannels
                   if insert_log is not None and (doc := import_progress(insert_log, v)) is not None}
        dropped = record.state == CollectionStatus.DROPPED or all(
            s is not None and s.collection_dropped for s in states)
        rows.append({
            "collection_id": record.collection_id, "name": record.name, "database": record.database,
            "state": CollectionStatus.DROPPED if dropped else record.state, "vchannels": record.vchannels,
            "pchannels": record.pchannels, "partitions": record.partitions,
            "fields": [{"name": f.name, "data_type": DataType.Name(f.data_type)} for f in record.schema.fields
                       if f.fieldID >= FIRST_USER_FIELD_ID],
            "inserted_rows": sum(s.rows for s in states if s),
            "gaps": [gaps[v] for v in record.vchannels if v in gaps],
            "imported_from_milvus": imports,
        })
    _print(rows)
    return 0


def show_segments(conf: Conf, args: argparse.Namespace) -> int:
    settings = Settings.of(conf)
    storage = StorageLayout.of(settings.storage)
    try:
        record = _collection(settings, args.collection)
    except AdminError as e:
        return _fail(str(e))
    binlogs = meta.segment_binlogs(storage, record.collection_id)
    rows = []
    for vchannel in record.vchannels:
        state = meta.channel_state(storage, record.collection_id, vchannel)
        for seg in sorted(state.segments.values(), key=lambda s: s.segment_id) if state else []:
            files = binlogs.get(seg.segment_id, [])
            rows.append({
                "segment_id": seg.segment_id, "vchannel": vchannel, "partition_id": seg.partition_id,
                "state": seg.state, "num_rows": seg.num_rows,
                "binlog_files": [f"{storage.insert_log(record.collection_id)}/{f['path']}" for f in files],
                "binlog_rows": sum(f["rows"] for f in files),
                "dml_position_ts": seg.dml_ts, "dml_position_offset": seg.dml_offset,
                "start_position_ts": seg.start_ts,
            })
    _print(rows)
    return 0


def _flush_pending(state, flush_ts: int) -> str | None:
    """Why a vchannel has not finished a flush at ``flush_ts`` yet (None: done)."""
    if state is None:
        return "nothing committed yet"
    if state.collection_dropped:
        return None
    if state.flush_requested_ts < flush_ts:
        return ("not in its committed state yet (a DataNode serving it commits the request with its next "
                "batch, once a TimeTick comes)")
    if state.flush_ts:
        return f"checkpoint ts {state.checkpoint_ts} has not reached the flush ts {state.flush_ts}"
    return None


def flush(conf: Conf, args: argparse.Namespace) -> int:
    """Milvus's Flush: seal the collection's segments at a flush ts (now), have each vchannel
    record them Flushed once its checkpoint passes it, and wait for that in Delta."""
    settings = Settings.of(conf)
    if (why := _refuse_in_mirror_mode(settings, "flush")) is not None:
        return _fail(why)
    storage = StorageLayout.of(settings.storage)
    try:
        record = _collection(settings, args.collection)
        flush_ts = now_ts()
        with _client(settings) as client:
            key = flush_request.flush_key(settings.etcd.root, record.collection_id)
            client.put(key, flush_request.encode(flush_ts))
    except (AdminError, EtcdError) as e:
        return _fail(str(e))
    print(f"admin: flush of {record.name} at ts {flush_ts} requested ({key}); waiting up to {args.timeout:g} s "
          f"for its {len(record.vchannels)} vchannel(s)", file=sys.stderr)
    deadline, reported = time.monotonic() + args.timeout, 0.0
    while True:
        states = {v: meta.channel_state(storage, record.collection_id, v) for v in record.vchannels}
        pending = {v: why for v, st in states.items() if (why := _flush_pending(st, flush_ts)) is not None}
        if not pending or time.monotonic() >= deadline:
            break
        if time.monotonic() - reported >= 5:
            reported = time.monotonic()
            print(f"admin: {len(record.vchannels) - len(pending)}/{len(record.vchannels)} vchannel(s) flushed; "
                  f"{next(iter(pending))}: {next(iter(pending.values()))}", file=sys.stderr)
        time.sleep(0.5)
    segments = [{"segment_id": seg.segment_id, "vchannel": v, "state": seg.state, "num_rows": seg.num_rows,
                 "sealed_ts": seg.sealed_ts, "seal_reason": seg.seal_reason}
                for v, st in states.items() if st is not None
                for seg in sorted(st.segments.values(), key=lambda s: s.segment_id)
                if seg.state == SegmentState.FLUSHED]
    _print({"collection": record.name, "flush_ts": flush_ts, "flushed": not pending,
            "pending": pending, "segments": segments})
    return 0 if not pending else 1


def produce(conf: Conf, args: argparse.Namespace) -> int:
    from ..mq.milvus_producer import MilvusProducer, Proxy, ticker
    from ..wire.schema import CollectionLayout
    settings = Settings.of(conf)
    if (why := _refuse_in_mirror_mode(settings, "produce")) is not None:
        return _fail(why)
    try:
        record = _collection(settings, args.collection)
    except AdminError as e:
        return _fail(str(e))
    broker = Broker.of(settings.broker)
    producer = MilvusProducer(Proxy(broker), CollectionLayout.from_proto(record.schema), record.collection_id,
                              record.name)
    stop = threading.Event()
    ticks = ticker(producer, record.pchannels, stop)
    started = time.monotonic()
    first_pks = []
    # Fresh segments for every run, as a Milvus proxy gets new ones once DataCoord sealed the old
    # (a sealed segment takes no more rows): ids from the clock, like Milvus's allocator.
    segments = [now_ts() + shard for shard in range(record.shards)]
    try:
        for i in range(args.messages):
            shard = i % record.shards
            first_pks.append(producer.insert(record.pchannels[shard], record.vchannels[shard],
                                             segment_id=segments[shard],
                                             partition_id=record.collection_id, rows=args.rows))
            if i % 50 == 49:
                print(f"admin: produced {i + 1}/{args.messages} InsertRequests", file=sys.stderr)
        deleted = first_pks[:args.deletes]
        for shard in range(record.shards):   # each key's delete to the vchannel of its insert, as Milvus's proxy
            keys = deleted[shard::record.shards]
            if keys:
                producer.delete(record.pchannels[shard], record.vchannels[shard], record.collection_id, keys)
        time.sleep(0.5)  # a few more ticks, so consumers see the last batch as closed
    finally:
        stop.set()
        ticks.join()
        producer.flush_producer()
        producer.proxy.close()
    seconds = time.monotonic() - started
    _print({"collection": record.name, "insert_requests": args.messages, "rows": args.messages * args.rows,
            "segments": segments, "deleted_pks": deleted, "wire_mb": round(producer.bytes / 1e6, 3),
            "seconds": round(seconds, 3)})
    return 0


def health(conf: Conf, args: argparse.Namespace) -> int:
    """etcd, the broker, and each DataNode: as etcd sees it (its channels' watch states) and as it
    sees itself (its status document: failing vchannels, etcd unreachable since), so that the
    answer stays useful while etcd is down. Healthy: the broker answers and a DataNode persists."""
    settings = Settings.of(conf)
    report: dict = {"etcd": "down", "broker": "down", "datanodes": []}
    root = settings.etcd.root
    now = time.time()
    statuses = read_statuses(StorageLayout.of(settings.storage), now)
    try:
        with _client(settings) as client:
            report["etcd"] = "up"
            watches = _watch_keys(client, root)
            for node_id in sorted(list_sessions(client, root, "datanode")):
                mine = {v: i for v, (n, i) in watches.items() if n == str(node_id)}
                serving = sorted(v for v, i in mine.items() if i.state == ChannelWatchState.WatchSuccess)
                report["datanodes"].append({"node_id": node_id, "session": "live", "channels": len(mine),
                                            "serving": len(serving), "healthy": len(serving) == len(mine)})
    except EtcdError as e:
        report["etcd_error"] = str(e)
    by_id = {d["node_id"]: d for d in report["datanodes"]}
    for st in statuses:
        entry = by_id.get(st.node_id)
        if entry is None:
            entry = {"node_id": st.node_id, "session": "unknown (etcd down)" if report["etcd"] == "down" else "none"}
            report["datanodes"].append(entry)
        entry.update({"process": st.name, "reported_s_ago": round(now - st.written_at, 1), "stale": st.stale(now),
                      "vchannels": st.vchannels, "failing": st.failing,
                      "etcd_unreachable_since": None if st.etcd_unreachable_since is None
                      else describe_outage(st.etcd_unreachable_since, st.etcd_error or "", now),
                      "sessions_lost": st.sessions_lost,
                      "storage_full": st.storage_full, "storage_full_for_s": None if st.storage_full_since is None
                      else round(now - st.storage_full_since),
                      "broker_unreachable_since": None if st.broker_unreachable_since is None
                      else describe_broker_outage(st.broker_unreachable_since, st.broker_error or "", now)})
        entry["healthy"] = entry.get("healthy", True) and st.persisting(now)
    try:
        Broker.of(settings.broker).ping(settings.pchannels.names()[0], timeout=5.0)
        report["broker"] = "up"
    except BrokerError as e:
        report["broker_error"] = str(e)
    ok = report["broker"] == "up" and any(d["healthy"] for d in report["datanodes"])
    report["healthy"] = ok
    _print(report)
    return 0 if ok else 1


def verify(conf: Conf, args: argparse.Namespace) -> int:
    """A mirror against the Milvus it mirrors (``admin.verify``; pymilvus is imported only here)."""
    from .verify import run
    return run(conf, args)
