"""``admin verify``: a mirror held against the Milvus it mirrors, collection by collection.

For each collection of the mirror's catalog (Milvus's names, ids and schemas, read from
Milvus's meta): Milvus's ``count(*)`` against the rows Delta's readers see; every primary key of
Milvus against every key of the table, as multisets (a key missing, extra or held twice in Delta
is a difference); and the values of every field of a seeded sample of the keys both hold (or of
all of them). Milvus is read first; before the table is read, each of the collection's vchannels
is given a while to commit a checkpoint past the moment Milvus was read, so that a DeltaNode a
few seconds behind does not show as a difference. Writes to Milvus while it runs do show:
verify a Milvus at rest, or read its differences with that in mind.

A field added to the live collection is in Milvus's meta before DeltaNode's table has its column
(the table is widened by the first commit after DeltaNode reads the change): the table's rows read
as null there until then, as its readers and Milvus's query read the rows written before the field,
and a null of a field with a default value is compared as that value, which Milvus answers for those
rows. Nothing waits for the widening: once the vchannels caught up, the table has it.

Prints one JSON document; exit 0 when every collection is equal, 1 when any differs (or could
not be read), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import Conf
from ..config.settings import Settings
from ..datacoord.catalog import CatalogError, CollectionRecord, CollectionStatus, find_record
from ..datacoord.catalog_of_conf import open_catalog
from ..delta.delta_log import DeltaLog
from ..delta.layout import StorageLayout
from ..etcd.client import EtcdClient
from ..etcd.errors import EtcdError
from ..failure.errors import BadInput
from ..mq.broker import Broker, BrokerError, HighWatermarks
from ..state import meta
from ..wire.names import pchannel_of
from ..wire.positions import now_ts
from ..wire.schema import CollectionLayout
from .milvus_reader import KEYS_PER_QUERY, MilvusReader, MilvusReadError, MilvusUnreachable
from .mirror_table import MirrorTable
from .row_differences import (
    DifferenceKind,
    KeyDifference,
    default_values,
    delta_values,
    differing_fields,
    key_differences,
    milvus_values,
)

PROGRESS_EVERY_S = 5.0
STALLED_AFTER_S = 15.0   # no checkpoint of a late collection moved for this long: stop waiting


class UsageError(BadInput):
    """A command line that names what cannot be verified (exit 2)."""


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    """What to verify and how, from the command line. Made and read in the admin command's process."""

    collections: tuple[str, ...]   # names or ids; empty: every collection Milvus has created
    sample: int | None             # rows whose fields are compared; None: every row
    seed: int
    milvus_uri: str
    milvus_token: str
    catch_up_timeout: float        # seconds to wait for DeltaNode to reach the moment Milvus was read
    max_listed: int                # differences listed per collection (all are counted)

    @classmethod
    def of(cls, args: argparse.Namespace) -> VerifyOptions:
        if args.sample is not None and args.sample < 1:
            raise UsageError(f"--sample must be at least 1, got {args.sample}")
        if args.catch_up_timeout < 0 or args.max_listed < 0:
            raise UsageError("--catch-up-timeout and --max-listed cannot be negative")
        token = args.milvus_token or ""
        if args.milvus_token_file:
            try:
                token = Path(args.milvus_token_file).read_text().rstrip("\n")
            except OSError as e:
                raise UsageError(f"--milvus-token-file: {e}") from None
        return cls(collections=tuple(args.collection or ()), sample=None if args.all_fields else args.sample or 100,
                   seed=args.seed, milvus_uri=args.milvus_uri, milvus_token=token,
                   catch_up_timeout=args.catch_up_timeout, max_listed=args.max_listed)


@dataclass(frozen=True, kw_only=True)
class CollectionReport:
    """What ``verify`` found for one collection. Made and read in the admin command's process."""

    record: CollectionRecord
    milvus_count: int | None = None
    milvus_keys: int | None = None
    delta_rows: int | None = None
    rows_compared: int = 0
    differences: tuple[KeyDifference, ...] = ()
    behind: tuple[str, ...] = ()   # vchannels whose checkpoint had not reached the moment Milvus was read
    error: str | None = None

    @property
    def equal(self) -> bool:
        return self.error is None and not self.differences and self.milvus_count == self.delta_rows

    def to_json(self, *, max_listed: int, all_fields: bool) -> dict:
        counts = {kind.value: 0 for kind in DifferenceKind}
        for d in self.differences:
            counts[d.kind.value] += 1
        doc = {"collection": self.record.name, "database": self.record.database,
               "collection_id": self.record.collection_id, "equal": self.equal,
               "summary": {"milvus_count": self.milvus_count, "delta_rows": self.delta_rows,
                           "milvus_keys": self.milvus_keys, **counts, "rows_compared": self.rows_compared,
                           "fields_compared": "all rows" if all_fields else "sample"},
               "caught_up": not self.behind, "behind": list(self.behind),
               "differences": [d.to_json() for d in self.differences[:max_listed]],
               "differences_not_listed": max(0, len(self.differences) - max_listed)}
        if self.error is not None:
            doc["error"] = self.error
        return doc


def _progress(message: str) -> None:
    print(f"admin verify: {message}", file=sys.stderr, flush=True)


def selected(records: list[CollectionRecord], names: tuple[str, ...]) -> list[CollectionRecord]:
    """The collections to verify: those named (each must be one Milvus has created), else every
    created one. Raises UsageError."""
    created = [r for r in records if r.state == CollectionStatus.CREATED]
    if not names:
        return created
    out = []
    for name in names:
        record = find_record(records, name)
        if record is None and "." in name:   # db.collection
            database, _, short = name.partition(".")
            record = find_record([r for r in records if r.database == database], short)
        if record is None:
            raise UsageError(f"no collection named {name!r} in the mirrored Milvus")
        if record.state != CollectionStatus.CREATED:
            raise UsageError(f"collection {name!r} is {record.state.value} in Milvus: there is nothing to verify")
        if record not in out:
            out.append(record)
    return out


def behind(storage: StorageLayout, record: CollectionRecord, ts: int, timeout: float,
           broker: Broker | None = None) -> tuple[str, ...]:
    """The vchannels of ``record`` whose committed checkpoint is still before ``ts`` after waiting
    up to ``timeout`` seconds for them, or until none of them moved for ``STALLED_AFTER_S`` (a
    DataNode that runs commits each vchannel's checkpoint at least every 10 s while Milvus ticks;
    with none running, each collection would otherwise wait the whole timeout).

    A vchannel is caught up too once ``broker`` (asked after ``ts``) has nothing on its pchannel
    past the committed checkpoint, or past the collection's start when it never committed: a
    Milvus 2.6 pchannel at rest gets no TimeTick, so its checkpoint's ts stays at its last message's
    (docs/milvus-facts.md §14)."""
    deadline = time.monotonic() + timeout
    seen: dict[str, tuple[int, int, int] | None] = {}
    moved_at = time.monotonic()
    heads = _Heads(broker)
    try:
        while True:
            insert_log = DeltaLog.open(storage.insert_log(record.collection_id), storage.options)
            states = {v: None if insert_log is None or (st := meta.channel_state_in(insert_log, v)) is None
                      else (st.checkpoint_ts, st.partition, st.checkpoint_offset) for v in record.vchannels}
            late = tuple(v for v, cp in states.items() if cp is None or cp[0] < ts)
            if late and heads.asking:
                at_head = heads.reached({v: _next_read(record, v, states[v]) for v in late})
                late = tuple(v for v in late if v not in at_head)
            if states != seen:
                seen, moved_at = states, time.monotonic()
            now = time.monotonic()
            if not late or now >= deadline or now - moved_at >= STALLED_AFTER_S:
                return late
            time.sleep(0.5)
    finally:
        heads.close()


def _next_read(record: CollectionRecord, vchannel: str, committed: tuple[int, int, int] | None) -> tuple[int, int]:
    """(pchannel partition, offset) ``vchannel`` reads next: its ``committed`` checkpoint's (ts,
    partition, offset), else right after its collection's start on its pchannel (the earliest any
    start of it can be)."""
    if committed is None:
        return 0, record.start_offsets.get(pchannel_of(vchannel), -1) + 1
    return committed[1], committed[2]


class _Heads:
    """The broker's high watermarks, for ``behind`` (None: no broker, every vchannel is judged by
    its ts alone). Made and read in the admin command's process."""

    def __init__(self, broker: Broker | None) -> None:
        self._watermarks: HighWatermarks | None = None
        if broker is not None:
            try:
                self._watermarks = broker.watermarks()
            except BrokerError as e:
                _progress(f"the broker's high watermarks cannot be asked ({e}): checkpoints are judged by their ts")

    @property
    def asking(self) -> bool:
        return self._watermarks is not None

    def reached(self, nexts: dict[str, tuple[int, int]]) -> set[str]:
        """The vchannels of ``nexts`` (vchannel -> the pchannel partition and the offset it reads
        next) with nothing on their pchannel at or past it; one the broker does not answer for is not."""
        if self._watermarks is None:
            return set()
        keys = {v: (pchannel_of(v), partition) for v, (partition, _) in nexts.items()}
        try:
            highs = self._watermarks.highs(sorted(set(keys.values())))
        except BrokerError:
            return set()
        return {v for v, (_, at) in nexts.items() if isinstance(high := highs.get(keys[v]), int) and at >= high}

    def close(self) -> None:
        if self._watermarks is not None:
            self._watermarks.close()


def compare_fields(reader: MilvusReader, table: MirrorTable, record: CollectionRecord, layout: CollectionLayout,
                   keys: list) -> tuple[int, list[KeyDifference]]:
    """The rows of ``keys`` field by field, Milvus's against each copy Delta holds: the number
    compared and the keys whose fields differ. A null in Delta of a field with a default value is
    that value, as Milvus answers the rows written before the field was added."""
    pk = layout.primary_key
    defaults = default_values(record.schema)
    compared, out = 0, []
    for i in range(0, len(keys), KEYS_PER_QUERY):
        chunk = keys[i:i + KEYS_PER_QUERY]
        delta = table.rows(chunk)
        for row in reader.rows(record.database, record.name, pk, chunk):
            key = row[pk.name]
            expected = milvus_values(layout, row)
            differ = {f for copy in delta.get(key, ())
                      for f in differing_fields(expected, delta_values(layout, copy, defaults))}
            compared += 1
            if differ:
                ordered = tuple(f.name for f in layout.fields if f.name in differ)
                out.append(KeyDifference(key=key, kind=DifferenceKind.FIELD_DIFFERS, milvus_copies=1,
                                         delta_copies=len(delta.get(key, ())), fields=ordered))
    return compared, out


def verify_collection(reader: MilvusReader, storage: StorageLayout, record: CollectionRecord,
                      options: VerifyOptions, broker: Broker | None = None) -> CollectionReport:
    name = record.name if record.database == "default" else f"{record.database}.{record.name}"
    layout = CollectionLayout.from_proto(record.schema)
    pk = layout.primary_key
    reported = [time.monotonic()]

    def on_page(read: int) -> None:
        if time.monotonic() - reported[0] >= PROGRESS_EVERY_S:
            reported[0] = time.monotonic()
            _progress(f"{name}: {read:,} keys read from Milvus")

    try:
        milvus_count = reader.count(record.database, record.name)
        milvus_keys = list(reader.keys(record.database, record.name, pk, on_page=on_page))
    except MilvusUnreachable:
        raise
    except MilvusReadError as e:
        return CollectionReport(record=record, error=str(e))
    late = behind(storage, record, now_ts(), options.catch_up_timeout, broker)
    if late:
        _progress(f"{name}: {len(late)} vchannel(s) had not committed past the moment Milvus was read after "
                  f"{options.catch_up_timeout:g} s (is DeltaNode running?): rows written since show as differences")
    table = MirrorTable(storage=storage, collection_id=record.collection_id, layout=layout)
    delta_keys = table.keys()
    differences = key_differences(milvus_keys, delta_keys)
    common = sorted(set(milvus_keys) & set(delta_keys))
    chosen = common if options.sample is None else \
        sorted(random.Random(options.seed).sample(common, min(options.sample, len(common))))
    try:
        compared, differ = compare_fields(reader, table, record, layout, chosen)
    except MilvusReadError as e:
        return CollectionReport(record=record, milvus_count=milvus_count, milvus_keys=len(milvus_keys),
                                delta_rows=len(delta_keys), differences=tuple(differences), behind=late, error=str(e))
    report = CollectionReport(record=record, milvus_count=milvus_count, milvus_keys=len(milvus_keys),
                              delta_rows=len(delta_keys), rows_compared=compared,
                              differences=tuple(sorted(differences + differ, key=lambda d: d.key)), behind=late)
    _progress(f"{name}: Milvus count(*) {milvus_count:,}, Delta {len(delta_keys):,} rows; "
              f"{len(report.differences):,} key(s) differ; fields of {compared:,} row(s) compared")
    return report


def run(conf: Conf, args: argparse.Namespace) -> int:
    settings = Settings.of(conf)
    if settings.mirror.meta_root is None:
        print("admin verify: the conf mirrors no Milvus (milvus.meta.root is not set): there is nothing to hold "
              "DeltaNode's tables against", file=sys.stderr)
        return 2
    try:
        options = VerifyOptions.of(args)
        with EtcdClient(settings.etcd.endpoints, security=settings.etcd.security) as client:
            catalog = open_catalog(settings, client)
            try:
                records = selected(catalog.collections(), options.collections)
            finally:
                catalog.close()
    except UsageError as e:
        print(f"admin verify: {e}", file=sys.stderr)
        return 2
    except (EtcdError, CatalogError) as e:
        print(f"admin verify: {e}", file=sys.stderr)
        return 1
    reports = []
    with MilvusReader(uri=options.milvus_uri, token=options.milvus_token) as reader:
        try:
            for record in records:
                reports.append(verify_collection(reader, StorageLayout.of(settings.storage), record, options,
                                                    Broker.of(settings.broker)))
        except MilvusUnreachable as e:
            print(f"admin verify: {e}", file=sys.stderr)
            return 1
    doc = {"milvus": options.milvus_uri, "equal": all(r.equal for r in reports),
           "collections": [r.to_json(max_listed=options.max_listed, all_fields=options.sample is None)
                           for r in reports]}
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return 0 if doc["equal"] else 1
