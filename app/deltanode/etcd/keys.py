"""The etcd key layout DeltaNode shares with Milvus 2.3 (docs/milvus-facts.md §4).

``root`` is Milvus's MetaRoot, ``{etcd.rootPath}/{etcd.metaSubPath}``, e.g. ``by-dev/meta``.
"""

from __future__ import annotations

#: The pseudo node under ``channelwatch/`` that parks channels while no DataNode is alive (MEP 7).
REMAINING = "remaining"


def server_id_key(root: str) -> str:
    return f"{root}/session/id"


def session_prefix(root: str, role: str) -> str:
    return f"{root}/session/{role}-"


def session_key(root: str, role: str, server_id: int) -> str:
    return f"{session_prefix(root, role)}{server_id}"


def channel_watch_root(root: str) -> str:
    return f"{root}/channelwatch/"


def channel_watch_prefix(root: str, node: int | str) -> str:
    """Prefix of one DataNode's watch keys; ``node`` is a server ID or :data:`REMAINING`."""
    return f"{channel_watch_root(root)}{node}/"


def channel_watch_key(root: str, node: int | str, vchannel: str) -> str:
    return f"{channel_watch_prefix(root, node)}{vchannel}"
