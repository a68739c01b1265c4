"""A mirrored Milvus's own answers, read through pymilvus's ``MilvusClient`` (the pymilvus of
setup.cfg, which talks to Milvus 2.3 too: docs/milvus-facts.md §12).

Every read is a ``query`` at consistency level Strong. Milvus 2.3 answers a query with a limit
only while offset + limit <= 16,384 (its query window), and a query without an expression only
with a limit: the keys are read in pages of primary-key ranges, the first with an empty
expression, then ``pk > last`` (``pk >= last + 1`` for an Int64 key: Milvus's parser cannot read
the literal -2^63). Each page comes back in key order, checked here: a page out of order or not
past the previous one would make this paging skip keys, and raises instead. Not pymilvus's
``query_iterator``: it writes its next page's ``pk > "last"`` without escaping the key, so a
VarChar key holding a double quote or a backslash ends it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from ..failure.errors import DeltaNodeError
from ..wire.schema import DataType, FieldSpec

Key = int | str

#: Milvus 2.3's query window (proxy: "invalid max query result window").
QUERY_WINDOW = 16384
#: Keys per ``pk in [...]`` query when rows are read by key.
KEYS_PER_QUERY = 1000
_INT64_MIN = -(1 << 63)


class MilvusReadError(DeltaNodeError):
    """Milvus refused or failed a read (the message says which and why)."""


class MilvusUnreachable(MilvusReadError):
    """No connection to Milvus at all: nothing can be read."""


def key_literal(spec: FieldSpec, key: Key) -> str:
    """``key`` as a literal of Milvus's expressions: a VarChar in double quotes with JSON's
    escapes, non-ASCII characters as they are (Milvus reads them; a \\u escape of a character
    outside the BMP it would not)."""
    if spec.data_type == DataType.VarChar:
        return json.dumps(str(key), ensure_ascii=False)
    return str(int(key))


def after(spec: FieldSpec, last: Key | None) -> str:
    """The expression of the keys after ``last`` (every key when None)."""
    if last is None:
        return ""
    if spec.data_type == DataType.VarChar:
        return f"{spec.name} > {key_literal(spec, last)}"
    return f"{spec.name} >= {int(last) + 1}"


def among(spec: FieldSpec, keys: list[Key]) -> str:
    """The expression of ``keys`` (the smallest Int64, which has no literal, by a comparison)."""
    lowest = [k for k in keys if spec.data_type != DataType.VarChar and int(k) == _INT64_MIN]
    rest = [k for k in keys if k not in lowest]
    parts = [f"{spec.name} in [{', '.join(key_literal(spec, k) for k in rest)}]"] if rest else []
    if lowest:
        parts.append(f"{spec.name} < {_INT64_MIN + 1}")
    return " or ".join(parts)


class MilvusReader:
    """Reads a Milvus's collections for ``admin verify``: one ``MilvusClient`` per database, made
    when first used. Runs in the admin command's process (no Spark); not thread-safe."""

    def __init__(self, *, uri: str, token: str = "", timeout: float = 60.0) -> None:
        self.uri, self._token, self.timeout = uri, token, timeout
        self._clients: dict[str, Any] = {}
        self._pymilvus: Any = None

    def _client(self, database: str) -> Any:
        if database not in self._clients:
            if self._pymilvus is None:
                from ..wire.milvus_proto import client_package
                self._pymilvus = client_package()
                # Failures are reported by this reader's callers, once, with the collection named.
                logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
            try:
                self._clients[database] = self._pymilvus.MilvusClient(
                    uri=self.uri, token=self._token, db_name="" if database == "default" else database,
                    timeout=self.timeout)
            except self._pymilvus.MilvusException as e:
                raise MilvusUnreachable(f"cannot connect to Milvus at {self.uri}: {_reason(e)}") from None
        return self._clients[database]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def __enter__(self) -> MilvusReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _query(self, database: str, collection: str, expr: str, fields: list[str], **kwargs: Any) -> list[dict]:
        client = self._client(database)
        try:
            return list(client.query(collection, filter=expr, output_fields=fields, consistency_level="Strong",
                                     timeout=self.timeout, **kwargs))
        except self._pymilvus.MilvusException as e:
            raise MilvusReadError(f"query of {collection} where {expr or '(all)'!r}: {_reason(e)}") from None

    def count(self, database: str, collection: str) -> int:
        """Milvus's ``count(*)`` of the collection."""
        rows = self._query(database, collection, "", ["count(*)"])
        return int(rows[0]["count(*)"])

    def keys(self, database: str, collection: str, pk: FieldSpec, *,
             on_page: Callable[[int], None] = lambda n: None) -> Iterator[Key]:
        """Every primary key of the collection, in key order, a window at a time; ``on_page``
        gets the number of keys read so far after each page."""
        last: Key | None = None
        read = 0
        while True:
            page = [row[pk.name] for row in self._query(database, collection, after(pk, last), [pk.name],
                                                        limit=QUERY_WINDOW)]
            if page != sorted(page) or (last is not None and page and page[0] <= last):
                raise MilvusReadError(f"{collection}: Milvus returned a page of keys out of key order after "
                                      f"{last!r}: paging by key ranges would skip keys")
            yield from page
            read += len(page)
            on_page(read)
            if len(page) < QUERY_WINDOW:
                return
            last = page[-1]

    def rows(self, database: str, collection: str, pk: FieldSpec, keys: list[Key]) -> Iterator[dict]:
        """The rows of ``keys``, every field (the dynamic field's keys flattened into each row, as
        pymilvus gives them), ``KEYS_PER_QUERY`` keys a query."""
        for i in range(0, len(keys), KEYS_PER_QUERY):
            yield from self._query(database, collection, among(pk, keys[i:i + KEYS_PER_QUERY]), ["*"])


def _reason(e: Exception) -> str:
    return getattr(e, "message", None) or str(e)
