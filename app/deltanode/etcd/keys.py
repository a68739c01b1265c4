"""The etcd key layout DeltaNode shares with Milvus 2.3 (docs/milvus-facts.md §4).

``root`` is Milvus's MetaRoot, ``{etcd.rootPath}/{etcd.metaSubPath}``, e.g. ``by-dev/meta``.
"""

from __future__ import annotations

#: The pseudo node under ``channelwatch/`` that parks channels while no DataNode is alive: Milvus's
#: DataCoord uses ``math.MinInt64`` (its channel store's buffer ID), so both read the same key.
BUFFER_NODE = str(-(2 ** 63))
#: Where DeltaNode 0.1 parked channels; read once and moved under :data:`BUFFER_NODE`.
LEGACY_REMAINING = "remaining"


def server_id_key(root: str) -> str:
    return f"{root}/session/id"


def session_prefix(root: str, role: str) -> str:
    return f"{root}/session/{role}-"


def session_key(root: str, role: str, server_id: int) -> str:
    return f"{session_prefix(root, role)}{server_id}"


def channel_watch_root(root: str) -> str:
    return f"{root}/channelwatch/"


def channel_watch_prefix(root: str, node: int | str) -> str:
    """Prefix of one DataNode's watch keys; ``node`` is a server ID or :data:`BUFFER_NODE`."""
    return f"{channel_watch_root(root)}{node}/"


def channel_watch_key(root: str, node: int | str, vchannel: str) -> str:
    return f"{channel_watch_prefix(root, node)}{vchannel}"
