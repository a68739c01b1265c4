"""Which table each collection is, by name (driver): DeltaNode's catalog names, or a mirrored Milvus's.

A collection of Milvus's default database (and every collection of DeltaNode's own catalog) is a
table named after it; a collection of another Milvus database is ``database.collection``. A
dropped collection is no table. When two live collections share a database and a name (a Milvus
collection dropped and made again while the old one drains), the newer one (the larger ID) is
the table.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from ..config import Conf
from ..datacoord.catalog import CollectionRecord, CollectionStatus
from ..wire.milvus_proto import schema_pb2
from ..wire.schema import CollectionLayout, SchemaError

log = logging.getLogger(__name__)

DEFAULT_DATABASE = "default"


@dataclass(frozen=True, kw_only=True)
class LakeTable:
    """One collection as a table: its names, its insert_log's URI and its fields (runs on the driver)."""

    name: str
    database: str
    collection_id: int
    uri: str
    layout: CollectionLayout
    schema: schema_pb2.CollectionSchema | None = None   # the layout's (its fields' default values)

    @property
    def qualified(self) -> str:
        """The name a query uses: the collection's, behind its database unless that is the default one."""
        return self.name if self.database == DEFAULT_DATABASE else f"{self.database}.{self.name}"


def lake_tables(records: list[CollectionRecord], storage) -> list[LakeTable]:
    """The tables of ``records`` (a catalog's collections; ``storage``: a ``StorageLayout``), by name.
    A collection whose schema DeltaNode cannot store is left out with a warning: it has no table."""
    newest: dict[tuple[str, str], CollectionRecord] = {}
    for r in records:
        if r.state == CollectionStatus.DROPPED:
            continue
        key = (r.database, r.name)
        if key not in newest or r.collection_id > newest[key].collection_id:
            newest[key] = r
    tables = []
    for (database, name), r in sorted(newest.items()):
        try:
            layout = CollectionLayout.from_proto(r.schema)
        except SchemaError as e:
            log.warning("collection %s (%d) has no table: %s", name, r.collection_id, e)
            continue
        tables.append(LakeTable(name=name, database=database, collection_id=r.collection_id,
                                uri=storage.insert_log(r.collection_id), layout=layout, schema=r.schema))
    return tables


def mentioned(tables: list[LakeTable], query: str) -> list[LakeTable]:
    """The tables whose collection name appears in ``query`` as a word (any case: Spark's names
    are case-insensitive). Registering a table reads its Delta log, so a query gets the tables it
    can name rather than every collection of the catalog."""
    return [t for t in tables
            if re.search(rf"(?<![\w$]){re.escape(t.name)}(?![\w$])", query, re.IGNORECASE)]


def catalog_tables(conf: Conf) -> list[LakeTable]:
    """The tables of the conf's catalog (DeltaNode's, or the Milvus's with ``milvus.meta.root``),
    read from etcd."""
    from ..config.settings import Settings
    from ..datacoord.catalog_of_conf import open_catalog
    from ..delta.layout import StorageLayout
    from ..etcd.client import EtcdClient
    settings = Settings.of(conf)
    with EtcdClient(settings.etcd.endpoints, security=settings.etcd.security) as client:
        catalog = open_catalog(settings, client)
        try:
            records = catalog.collections()
        finally:
            catalog.close()
    return lake_tables(records, StorageLayout.of(settings.storage))
