"""The channel watch keys in etcd (coordinator): reading them all, and writing each change as one
conditional transaction, so a key another writer changed meanwhile is left for the next pass.

``{root}/channelwatch/{node_id}/{vchannel}`` holds a ChannelWatchInfo; parked channels sit
under Milvus's buffer node, and under ``remaining/`` where DeltaNode 0.1 parked them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState, VchannelInfo
from deltanode.wire.milvus_proto import schema_pb2

from .channel_policy import ChannelSpec, WatchEntry

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """The key and value handing ``spec`` to ``node`` (None: parking it)."""

    spec: ChannelSpec
    node: int | None
    key: str
    value: bytes


class WatchKeys:
    """Reads and writes the watch keys; every write is conditional on what was read.

    Runs on the coordinator; called by the channel-manager thread, inside a pass.
    """

    def __init__(self, client: EtcdClient, root: str, recovery: Callable[[str], VchannelInfo],
                 schema: Callable[[str], schema_pb2.CollectionSchema | None]) -> None:
        self._client = client
        self._root = root
        self._recovery = recovery
        self._schema = schema
        self._last_op_id = 0

    def load(self) -> list[WatchEntry]:
        root = keys.channel_watch_root(self._root)
        entries = []
        for key, value, version in self._client.get_prefix(root):
            node_part, _, vchannel = key[len(root):].partition("/")
            parked = node_part in (keys.BUFFER_NODE, keys.LEGACY_REMAINING)
            if not vchannel or not (node_part.isdigit() or parked):
                log.warning("ignoring %s: not {node}/{vchannel} under %s", key, root)
                continue
            try:
                info = ChannelWatchInfo.FromString(value)
            except DecodeError as exc:
                log.error("ignoring %s: not a ChannelWatchInfo (%s)", key, exc)
                continue
            entries.append(WatchEntry(key=key, node=None if parked else int(node_part), vchannel=vchannel,
                                      info=info, version=version,
                                      legacy_parked=node_part == keys.LEGACY_REMAINING))
        return entries

    # -- writes -----------------------------------------------------------------------

    def put_new(self, planned: list[Assignment]) -> list[Assignment]:
        """Write keys that do not exist yet: one etcd transaction for them all, or one each when
        some key appeared meanwhile. Returns those written."""
        if self._client.put_all_if_absent({a.key: a.value for a in planned}):
            return planned
        return [a for a in planned if self._client.put_if_absent(a.key, a.value)]

    def replace(self, e: WatchEntry, assignment: Assignment) -> bool:
        """Put ``assignment`` in place of ``e``, if ``e`` is unchanged."""
        if assignment.key == e.key:
            return self._client.compare_version_and_swap(e.key, e.version, assignment.value)
        return self._client.move_if_version(e.key, e.version, assignment.key, assignment.value)

    def release(self, e: WatchEntry) -> bool:
        """Ask ``e``'s node to release its channel (ToRelease), if ``e`` is unchanged."""
        info = ChannelWatchInfo()
        info.CopyFrom(e.info)
        info.state = ChannelWatchState.ToRelease
        info.progress = 0
        info.startTs = int(time.time())
        info.opID = self._next_op_id()
        return self._client.compare_version_and_swap(e.key, e.version, info.SerializeToString())

    def delete(self, e: WatchEntry) -> bool:
        return self._client.delete_if_version(e.key, e.version)

    # -- values -----------------------------------------------------------------------

    def assignment(self, spec: ChannelSpec, node: int | None) -> Assignment:
        """The key and value assigning ``spec`` to ``node``, or parking it when ``node`` is None;
        asks ``recovery()`` and ``schema()`` for a node's."""
        if node is None:
            key, value = keys.channel_watch_key(self._root, keys.BUFFER_NODE, spec.vchannel), self._parked(spec)
        else:
            key, value = keys.channel_watch_key(self._root, node, spec.vchannel), self._to_watch(spec.vchannel)
        return Assignment(spec=spec, node=node, key=key, value=value)

    def _to_watch(self, vchannel: str) -> bytes:
        info = ChannelWatchInfo(vchan=self._recovery(vchannel), startTs=int(time.time()),
                                state=ChannelWatchState.ToWatch, opID=self._next_op_id())
        schema = self._schema(vchannel)
        if schema is not None:
            info.schema.CopyFrom(schema)
        return info.SerializeToString()

    def _parked(self, spec: ChannelSpec) -> bytes:
        """Nobody reads a parked channel's value: it is re-created from recovery() on hand-out."""
        vchan = VchannelInfo(collectionID=spec.collection_id, channelName=spec.vchannel)
        return ChannelWatchInfo(vchan=vchan, startTs=int(time.time()), state=ChannelWatchState.ToWatch,
                                opID=self._next_op_id()).SerializeToString()

    def _next_op_id(self) -> int:
        # Microseconds since the epoch, strictly increasing: larger than any opID written
        # by an earlier coordinator process.
        self._last_op_id = max(self._last_op_id + 1, time.time_ns() // 1000)
        return self._last_op_id
