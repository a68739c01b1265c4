"""A struct array's vectors in the lake's JSON rows: each written as a column of that vector type
is (``lake.rows_json``), by the sub-field types the view's comment names (``lake.columns``).

Milvus 2.6's ArrayOfVector sub-fields take every dense vector type (pkg/v2 v2.6.6
``typeutil.EstimateSizePerRecord``: Float, Binary, Float16, BFloat16 and Int8 vectors); the
Delta column holds each struct's vector as a top-level column of its type does (``wire.schema``).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql import types as T

from deltanode.lake import columns
from deltanode.lake.rows_json import RowRenderer
from deltanode.wire.milvus_proto import schema_pb2
from deltanode.wire.schema import CollectionLayout, DataType

# sub-field -> (element type, dim, one vector as stored, the same as Milvus's clients give it)
HALF = np.array([1.5, -2.0], "<f2").tobytes()
BFLOAT = b"".join(np.array([x], "<f4").tobytes()[2:] for x in (1.0, -0.5))
VECTORS = {
    "f32": (DataType.FloatVector, 2, [0.5, -1.0], [0.5, -1.0]),
    "f16": (DataType.Float16Vector, 2, bytearray(HALF), [1.5, -2.0]),
    "bf16": (DataType.BFloat16Vector, 2, bytearray(BFLOAT), [1.0, -0.5]),
    "bin": (DataType.BinaryVector, 16, bytearray(b"\x80\x01"), [128, 1]),
    "i8": (DataType.Int8Vector, 2, [-3, 7], [-3, 7]),
}
SPARK = {pa.binary(): T.BinaryType(), pa.float32(): T.FloatType(), pa.int8(): T.ByteType(),
         pa.int32(): T.IntegerType(), pa.int64(): T.LongType()}


def _layout() -> CollectionLayout:
    schema = schema_pb2.CollectionSchema(name="c")
    schema.fields.add(fieldID=100, name="pk", data_type=DataType.Int64, is_primary_key=True)
    struct = schema.struct_array_fields.add(fieldID=101, name="clips")
    struct.type_params.add(key="max_capacity", value="4")
    struct.fields.add(fieldID=102, name="clips[n]", data_type=DataType.Array, element_type=DataType.Int32)
    for i, (name, (element, dim, _, _)) in enumerate(VECTORS.items()):
        sub = struct.fields.add(fieldID=103 + i, name=f"clips[{name}]", data_type=DataType.ArrayOfVector,
                                element_type=element)
        sub.type_params.add(key="dim", value=str(dim))
    return CollectionLayout.from_proto(schema)


def _spark(t: pa.DataType) -> T.DataType:
    """Spark's type of an Arrow column type DeltaNode writes (as delta-spark reads it)."""
    if pa.types.is_list(t):
        return T.ArrayType(_spark(t.value_type))
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, _spark(f.type)) for f in t])
    return SPARK[t]


def test_a_struct_arrays_vectors_are_written_as_their_types_columns_are():
    layout = _layout()
    clips = next(f for f in layout.fields if f.name == "clips")
    comment = columns.comment(clips)
    assert columns.member_types({"comment": comment}) == {
        "n": "Int32", "f32": "FloatVector", "f16": "Float16Vector", "bf16": "BFloat16Vector", "bin": "BinaryVector",
        "i8": "Int8Vector"}
    arrow = layout.insert_schema().field("clips").type
    schema = T.StructType([T.StructField("clips", _spark(arrow), True, {"comment": comment})])
    struct = Row(n=[1, 2], **{name: stored for name, (_, _, stored, _) in VECTORS.items()})
    renderer = RowRenderer(schema)
    got = json.loads(renderer.render([[struct, struct]]))
    one = {"n": [1, 2]} | {name: shown for name, (_, _, _, shown) in VECTORS.items()}
    assert got == {"clips": [one, one]}
    assert json.loads(renderer.render([None])) == {"clips": None}
    # A top-level vector column of each type is written the same way.
    for name, (_, dim, stored, shown) in VECTORS.items():
        top = next(f for f in clips.sub_fields if f.name == name)
        spec_comment = f"Milvus {top.element_type_name}, dim {dim}"
        spark_type = _spark(arrow.value_type.field(name).type)
        line = RowRenderer(T.StructType([T.StructField("v", spark_type, True, {"comment": spec_comment})]))
        assert json.loads(line.render([stored])) == {"v": shown}, name


def test_a_column_that_is_no_struct_array_has_no_member_types():
    assert columns.member_types({"comment": "Milvus Array of Int32, nullable"}) == {}
    assert columns.member_types({"comment": "a user's own words (n: Array of Int32)"}) == {}
    assert columns.member_types({}) == {}
