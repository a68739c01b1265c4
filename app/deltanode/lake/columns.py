"""What each column of a lake table holds, in Milvus's terms, in the column's comment (driver).

The Delta tables keep binary, Float16 and BFloat16 vectors as bytes and JSON as text
(``wire.schema``); a query's result says only "binary" or "string". The views put the Milvus type
in each user field's comment (``Milvus Float16Vector, dim 4``). Spark keeps a column's comment
through the plain references and aliases of a query (an expression over it has none), so the
JSON writer knows which bytes are which vector and which text is JSON, and ``DESCRIBE`` shows it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..wire.schema import DataType, FieldSpec

PREFIX = "Milvus "
SYSTEM_COMMENTS = {
    "_ts": "DeltaNode: the insert's hybrid timestamp (TSO)",
    "_row_id": "DeltaNode: the row ID Milvus's proxy gave the row",
    "_segment_id": "DeltaNode: the segment the row was written to",
    "_partition_id": "DeltaNode: the partition the row was written to",
}


def comment(field: FieldSpec) -> str:
    """``Milvus <type>`` with what else Milvus says of the field: dim, element type, keys, dynamic;
    a struct array's sub-fields in parentheses (``Milvus ArrayOfStruct (n: Array of Int32, v:
    ArrayOfVector of FloatVector, dim 2)``)."""
    parts = [PREFIX + field.type_name]
    if field.data_type in (DataType.Array, DataType.ArrayOfVector):
        parts[0] += f" of {field.element_type_name}"
    if field.sub_fields:
        parts[0] += " (" + ", ".join(f"{sub.name}: {comment(sub)[len(PREFIX):]}" for sub in field.sub_fields) + ")"
    if field.dim:
        parts.append(f"dim {field.dim}")
    for flag, words in (("is_primary_key", "primary key"), ("is_partition_key", "partition key"),
                        ("is_dynamic", "dynamic field"), ("nullable", "nullable")):
        if getattr(field, flag):
            parts.append(words)
    return ", ".join(parts)


def milvus_type(metadata: Mapping[str, object]) -> str | None:
    """The Milvus type a column's metadata names (``Float16Vector``), None for any other column."""
    text = metadata.get("comment")
    if not isinstance(text, str) or not text.startswith(PREFIX):
        return None
    return text[len(PREFIX):].split(",")[0].split(" ")[0]


# A sub-field in a struct array's comment: its name (Milvus allows letters, digits and '_'), then
# its type, up to the next sub-field or the closing parenthesis.
_SUB_FIELD = re.compile(r"(?:\(|, )(\w+): (\w+)(?: of (\w+))?")


def member_types(metadata: Mapping[str, object]) -> dict[str, str]:
    """The Milvus type of each member of a struct array column's structs, by name: what one
    struct holds of each sub-field, an Array sub-field's element (``Int32``), an ArrayOfVector
    sub-field's vector (``Float16Vector``). Empty for a column that is no struct array."""
    text = metadata.get("comment")
    if milvus_type(metadata) != "ArrayOfStruct" or not isinstance(text, str):
        return {}
    return {name: element or kind for name, kind, element in _SUB_FIELD.findall(text)}
