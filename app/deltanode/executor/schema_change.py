"""A live collection's new schema, judged against the one a vchannel's router writes with (pure logic).

Milvus 2.6 adds a field to a live collection (``add_collection_field``) by a broadcast DDL that
carries the collection's whole new schema, its ``version`` one up (docs/milvus-facts.md §13). What
DeltaNode follows is a pure addition: every field of the schema it writes with is still there, by
field id, with its name, type, dimension and primary key as they were, and each new field is
nullable (Milvus refuses any other: the rows written before it have no value for it). Anything
else (a field removed, renamed or retyped, a primary key change) is refused with the field named:
the table's columns would no longer say what its older rows hold.

A schema older than the one written with (a lower ``version``) is a change the vchannel's
collection has taken already (another vchannel of it read its own copy first): it adds nothing.
"""

from __future__ import annotations

import enum
import functools

from google.protobuf.message import DecodeError

from ..failure.errors import BadInput
from ..wire.milvus_proto import schema_pb2
from ..wire.schema import CollectionLayout, FieldSpec


class Verdict(enum.Enum):
    """What a schema change is to a router. Runs on executors."""

    ADOPT = "adopt"   # it adds columns the layout lacks: written with from where it stands
    KNOWN = "known"   # it adds none (the layout has them, or it is older): its flushed segments seal


class NotAnAddition(BadInput):
    """The new schema is not the current one plus nullable fields; ``str(self)`` names the field.
    Raised on executors (a router quarantines the message with it)."""


@functools.lru_cache(maxsize=1 << 10)
def parsed(raw: bytes) -> schema_pb2.CollectionSchema:
    """A serialized CollectionSchema, parsed once per process (every task of a cycle ships the
    collection's schema; do not change the message)."""
    return schema_pb2.CollectionSchema.FromString(raw)


def version_of(raw: bytes) -> int:
    """The ``version`` of a serialized CollectionSchema."""
    return parsed(raw).version


def judge(current_version: int, layout: CollectionLayout, new: bytes) -> Verdict:
    """Whether the schema ``new`` (serialized) adds columns to ``layout`` (of a schema at
    ``current_version``); raises ``NotAnAddition`` when it is no pure addition of nullable fields."""
    try:
        schema = parsed(new)
        new_layout = CollectionLayout.from_proto(schema)
    except (DecodeError, ValueError) as e:   # SchemaError, or a type parameter that is no number
        raise NotAnAddition(f"the new schema (version {_version(new)}) is not one DeltaNode stores: {e}") from None
    if schema.version < current_version:
        return Verdict.KNOWN
    by_id = {f.field_id: f for f in new_layout.fields}
    for f in layout.fields:
        g = by_id.get(f.field_id)
        where = f"field {f.name!r} (id {f.field_id})"
        if g is None:
            raise NotAnAddition(f"{where} removed by schema version {schema.version}")
        if g.name != f.name:
            raise NotAnAddition(f"{where} renamed to {g.name!r} by schema version {schema.version}")
        if g.is_primary_key != f.is_primary_key:
            raise NotAnAddition(f"{where} {'made' if g.is_primary_key else 'no longer'} the primary key by schema "
                                f"version {schema.version}")
        if _shape(g) != _shape(f):
            raise NotAnAddition(f"{where} retyped from {_shape_text(f)} to {_shape_text(g)} by schema version "
                                f"{schema.version}")
    known = {f.field_id for f in layout.fields}
    added = [g for g in new_layout.fields if g.field_id not in known]
    for g in added:
        if not g.nullable:
            raise NotAnAddition(f"field {g.name!r} (id {g.field_id}) added by schema version {schema.version} is not "
                                "nullable: the rows written before it would have no value for it")
    return Verdict.ADOPT if added else Verdict.KNOWN


def _version(raw: bytes) -> str:
    try:
        return str(parsed(raw).version)
    except DecodeError:
        return "?"


def _shape(f: FieldSpec) -> tuple:
    """What a field's column is made of: its type, element type, dimension and sub-fields."""
    return (f.data_type, f.element_type, f.dim, tuple((sub.name, _shape(sub)) for sub in f.sub_fields))


def _shape_text(f: FieldSpec) -> str:
    text = f.type_name
    if f.element_type:
        text += f" of {f.element_type_name}"
    if f.dim:
        text += f" (dim {f.dim})"
    if f.sub_fields:
        text += " (" + ", ".join(f"{sub.name}: {_shape_text(sub)}" for sub in f.sub_fields) + ")"
    return text
