"""A flush request through etcd: Milvus DataCoord's ``FlushChannels(flushTs)``, for DeltaNode.

Milvus's DataCoord asks each DataNode over gRPC to flush a collection's channels up to a flush
timestamp (docs/milvus-facts.md §6). DeltaNode's DataNodes take no calls: ``admin flush`` (or a
coordinator) writes ``{root}/deltanode/flush/{collectionID}`` = ``{"flush_ts": T}``, and every
DataNode watches that prefix and flushes the collection's vchannels it owns (``pipeline.
request_flush``). One key per collection, only ever moved to a later ts; a DataNode that
starts, or takes over a vchannel, reads the key again and ignores a request its vchannel
already took (the vchannel's ``flush_requested_ts``, committed with its state).
"""

from __future__ import annotations

import json

from ..failure.errors import BadInput


class BadFlushRequest(BadInput):
    """A key or value under the flush prefix that is not a flush request."""


def flush_prefix(root: str) -> str:
    return f"{root}/deltanode/flush/"


def flush_key(root: str, collection_id: int) -> str:
    return f"{flush_prefix(root)}{collection_id}"


def encode(flush_ts: int) -> str:
    return json.dumps({"flush_ts": flush_ts})


def decode(root: str, key: str, value: bytes) -> tuple[int, int]:
    """(collection id, flush ts) of a key under :func:`flush_prefix`; raises BadFlushRequest."""
    name = key[len(flush_prefix(root)):]
    try:
        collection_id = int(name)
        flush_ts = json.loads(value)["flush_ts"]
    except (ValueError, KeyError, TypeError) as e:
        raise BadFlushRequest(f"{key}: not a flush request ({type(e).__name__}: {e})") from None
    if not isinstance(flush_ts, int) or flush_ts <= 0:
        raise BadFlushRequest(f"{key}: flush_ts must be a positive hybrid timestamp, not {flush_ts!r}")
    return collection_id, flush_ts
