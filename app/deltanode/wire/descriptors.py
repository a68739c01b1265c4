"""Declaring Milvus's internal protobuf messages by hand, with their real package and field numbers.

pymilvus ships the public milvus-proto modules (common, schema, msg, milvus) but not Milvus's
``internal/proto`` files (data_coord.proto, etcd_meta.proto). The modules that need those
messages declare the subset they read with these helpers; the generated public modules are
loaded first so the declarations can refer to their types (MsgPosition, CollectionSchema, ...).
Fields left out are skipped by protobuf when parsing, so a subset stays wire compatible.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FileDescriptor

from .milvus_proto import common_pb2, msg_pb2, schema_pb2

FieldProto: TypeAlias = descriptor_pb2.FieldDescriptorProto
DEPENDENCIES = ["common.proto", "msg.proto", "schema.proto"]


def field(name: str, number: int, ftype: int, *, repeated: bool = False, type_name: str = "") -> FieldProto:
    """One field declaration; ``type_name`` (".package.Message") for messages and enums."""
    label = FieldProto.LABEL_REPEATED if repeated else FieldProto.LABEL_OPTIONAL
    out = FieldProto(name=name, number=number, type=ftype, label=label)
    if type_name:
        out.type_name = type_name
    return out


def load(file: descriptor_pb2.FileDescriptorProto) -> tuple[dict[str, Any], FileDescriptor]:
    """The message classes of ``file`` (by full name) and its FileDescriptor, added to protobuf's
    default pool once per process (where the generated milvus modules live). The classes are
    made at run time, so to mypy they are Any, like the generated ones."""
    pool = descriptor_pool.Default()
    for module in (common_pb2, msg_pb2, schema_pb2):   # the dependencies, loaded
        assert module.DESCRIPTOR.name in DEPENDENCIES
    try:
        found = pool.FindFileByName(file.name)
    except KeyError:
        pool.Add(file)
        found = pool.FindFileByName(file.name)
    classes = message_factory.GetMessages([descriptor_pb2.FileDescriptorProto.FromString(found.serialized_pb)],
                                          pool=pool)
    return classes, found
