"""Real vchannel flowgraphs and the driver's stages around them, for the pipeline's unit tests.

``stages`` wires ``SyncManager``, ``VchannelLoader`` and ``VchannelStops`` as ``Pipeline`` does,
on Delta tables under a test's directory; only Spark, etcd and the broker are fakes
(``tests/unit/fakes.py``). ``read_rows``, ``read_deletes`` and ``read_ticks`` apply to a
flowgraph what a cycle's task would have returned for it: binlog files really written (by the
executors' ``BinlogWriter``), applied through ``state_update.advance`` as the cycle applies them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from deltanode.config.sections.pipeline import SyncSettings
from deltanode.delta.layout import StorageLayout
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.pipeline.loader import VchannelLoader
from deltanode.pipeline.sync_manager import SyncManager
from deltanode.pipeline.vchannel_stops import Fence, VchannelStops
from deltanode.records import Portion, PortionStats
from deltanode.vchannel.flowgraph import VchannelFlowgraph
from deltanode.vchannel.state_update import advance
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import schema_from_json

from .fakes import FakeSparkContext

if TYPE_CHECKING:
    from deltanode.milvus_import.importer import VchannelImporter

SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}


def flowgraph(collection_id: int, shard: int = 0, seek: int = 0) -> VchannelFlowgraph:
    """Shard ``shard`` of collection ``collection_id`` (an Int64 key ``pk``), handed over at offset
    ``seek`` of pchannel ``dml_{shard}``; not loaded yet."""
    info = VchannelInfo(collectionID=collection_id,
                        channelName=vchannel_name(pchannel_name("dml", shard), collection_id, shard))
    info.seek_position.msgID = CODECS["kafka"].to_msg_id(seek)
    return VchannelFlowgraph(info, schema_from_json(SCHEMA, f"c{collection_id}"), node_id=1)


@dataclass
class Stages:
    storage: StorageLayout
    sc: FakeSparkContext
    syncs: SyncManager
    loader: VchannelLoader
    failures: VchannelStops


def stages(root: Path, *, fence: Fence | None = None, settings: SyncSettings = SyncSettings(),
           new_collection_files: int = 0, max_tasks: int = 4, importer: VchannelImporter | None = None) -> Stages:
    """The sync, load and failure stages of a pipeline storing its tables under ``root``."""
    storage, sc = StorageLayout(str(root)), FakeSparkContext()
    failures: list[VchannelStops] = []
    syncs = SyncManager(sc=sc, storage=storage, settings=settings, fence=fence,   # type: ignore[arg-type]
                        fail=lambda *args, **kwargs: failures[0].fail(*args, **kwargs),
                        new_collection_files=new_collection_files, max_tasks=max_tasks)
    loader = VchannelLoader(syncs=syncs, importer=importer)
    failures.append(VchannelStops(storage=storage, fence=fence, load=loader.load, forget_topic=loader.forget))
    return Stages(storage, sc, syncs, loader, failures[0])


def loaded(s: Stages, collection_id: int, shard: int = 0) -> VchannelFlowgraph:
    fg = flowgraph(collection_id, shard)
    s.loader.load(fg)
    return fg


def _apply(fg: VchannelFlowgraph, files: tuple, segments: dict, stats: PortionStats, messages: int) -> None:
    first = fg.next_offset
    portion = Portion(fg.vchannel, first, first + messages, files, segments, stats=stats)
    fg.apply(advance(fg.working, [portion]), time.monotonic())


def read_rows(fg: VchannelFlowgraph, storage: StorageLayout, pks: list[int], *, segment: int = 5,
              partition: int = 1, ts: int = 100, tick: int = 1000, messages: int = 10) -> None:
    """A batch of ``messages`` messages whose rows ``pks`` (``_ts`` from ``ts`` up) go to ``segment``."""
    writer = BinlogWriter(storage, fg.collection_id, fg.layout.insert_schema(), fg.layout.delete_schema())
    n = len(pks)
    writer.add_insert(segment, partition, [pa.array(pks, pa.int64()), pa.array(range(ts, ts + n), pa.int64()),
                                           pa.array(pks, pa.int64())], n, 24 * n, fg.next_offset, ts, ts + n - 1)
    _apply(fg, tuple(writer.close()), dict(writer.segments), PortionStats(tick, 1, 24 * n, n), messages)


def read_deletes(fg: VchannelFlowgraph, storage: StorageLayout, pks: list[int], *, partition: int = 1,
                 ts: int = 500, tick: int = 1000, messages: int = 10) -> None:
    """A batch of ``messages`` messages with a delete of ``pks`` at ``ts`` in ``partition``."""
    writer = BinlogWriter(storage, fg.collection_id, fg.layout.insert_schema(), fg.layout.delete_schema())
    n = len(pks)
    writer.add_delete(partition, pa.array(pks, pa.int64()), pa.array([ts] * n, pa.int64()))
    _apply(fg, tuple(writer.close()), {}, PortionStats(tick, 1, 16 * n, 0, n), messages)


def read_ticks(fg: VchannelFlowgraph, *, tick: int = 1000, messages: int = 10) -> None:
    """A batch of ``messages`` messages that are TimeTicks (the last at ``tick``) or others' messages."""
    _apply(fg, (), {}, PortionStats(tick), messages)
