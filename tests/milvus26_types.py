"""A Milvus 2.6 collection with every type it adds, its rows as plain Python values, and those rows
as the 2.6 proxy puts them in an InsertRequest: shared by the unit and integration tests of the
2.5/2.6 types.

The wire shapes are Milvus's (docs/milvus-facts.md §15), written here from Milvus's sources and
not through DeltaNode's decoder: a nullable field in the proxy's full form (a placeholder in the
slot of each null, ``valid_data`` one bool a row, every row true when none is null), a
Timestamptz as UTC microseconds in ``timestamptz_data``, a Geometry as little-endian WKB in
``geometry_data``, an Int8Vector as ``int8_vector`` bytes, a struct array flattened into one
column per sub-field (its id, the name ``struct[sub]``; an Array, or an ArrayOfVector whose
``vector_array`` holds a VectorField a row), and no column for the BM25 function's output.
``expected_row`` is a row as DeltaNode's insert table must give it back (``read_table``).
"""

from __future__ import annotations

import datetime
import json
import struct

import numpy as np

from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2

DataType = schema_pb2.DataType
STRUCT, LEN, EMB = "clips", "len", "emb"
EMB_DIM, VEC_DIM, QVEC_DIM, MAX_CLIPS = 2, 4, 8, 3
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
# (field id, name): the columns of the insert table, in order (the BM25 output has none).
PK, TITLE, BODY, AT, PLACE, TENANT, SCORE, TAGS, DOC, VEC, QVEC, SPARSE, FLAG, META = range(100, 114)
STRUCT_ID, LEN_ID, EMB_ID = 114, 115, 116
BM25_ID = 9001
SCORE_DEFAULT = 1.5   # the proxy puts it where a client sends no score (or a null one)
COLUMNS = ("pk", "title", "body", "at", "place", "tenant", "score", "tags", "doc", "vec", "qvec", "flag", "$meta",
           STRUCT)


def _field(fid: int, name: str, t: int, **kw) -> schema_pb2.FieldSchema:
    params = kw.pop("params", {})
    f = schema_pb2.FieldSchema(fieldID=fid, name=name, data_type=t, **kw)
    for k, v in params.items():
        f.type_params.add(key=k, value=str(v))
    return f


def fields() -> list[schema_pb2.FieldSchema]:
    """The collection's fields as RootCoord keeps them (``root-coord/fields/``), system fields too."""
    return [
        _field(0, "RowID", DataType.Int64), _field(1, "Timestamp", DataType.Int64),
        _field(PK, "pk", DataType.Int64, is_primary_key=True),
        _field(TITLE, "title", DataType.VarChar, params={"max_length": 128, "enable_analyzer": "true"}),
        _field(BODY, "body", DataType.Text, nullable=True),
        _field(AT, "at", DataType.Timestamptz, nullable=True),
        _field(PLACE, "place", DataType.Geometry, nullable=True),
        _field(TENANT, "tenant", DataType.Int64, is_partition_key=True),
        _field(SCORE, "score", DataType.Float, nullable=True,
               default_value=schema_pb2.ValueField(float_data=SCORE_DEFAULT)),
        _field(TAGS, "tags", DataType.Array, element_type=DataType.VarChar, nullable=True,
               params={"max_capacity": 4, "max_length": 16}),
        _field(DOC, "doc", DataType.JSON, nullable=True),
        _field(VEC, "vec", DataType.FloatVector, params={"dim": VEC_DIM}),
        _field(QVEC, "qvec", DataType.Int8Vector, params={"dim": QVEC_DIM}),
        _field(SPARSE, "sparse", DataType.SparseFloatVector, is_function_output=True),
        _field(FLAG, "flag", DataType.Bool, nullable=True),
        _field(META, "$meta", DataType.JSON, is_dynamic=True, description="dynamic schema"),
    ]


def struct_field() -> schema_pb2.StructArrayFieldSchema:
    """The struct array (``root-coord/struct-array-fields/``), its sub-fields named ``struct[sub]``."""
    s = schema_pb2.StructArrayFieldSchema(fieldID=STRUCT_ID, name=STRUCT)
    s.type_params.add(key="max_capacity", value=str(MAX_CLIPS))
    s.fields.extend([
        _field(LEN_ID, f"{STRUCT}[{LEN}]", DataType.Array, element_type=DataType.Int32),
        _field(EMB_ID, f"{STRUCT}[{EMB}]", DataType.ArrayOfVector, element_type=DataType.FloatVector,
               params={"dim": EMB_DIM}),
    ])
    return s


def bm25() -> schema_pb2.FunctionSchema:
    return schema_pb2.FunctionSchema(name="title_bm25", id=BM25_ID, type=schema_pb2.FunctionType.BM25,
                                     input_field_names=["title"], input_field_ids=[TITLE],
                                     output_field_names=["sparse"], output_field_ids=[SPARSE])


def schema(name: str = "every26") -> schema_pb2.CollectionSchema:
    """The whole schema, as Milvus's proxy sends it with a CreateCollection."""
    return schema_pb2.CollectionSchema(name=name, enable_dynamic_field=True, fields=fields(),
                                       struct_array_fields=[struct_field()], functions=[bm25()])


# -- rows ----------------------------------------------------------------------------------------
def wkb_point(x: float, y: float) -> bytes:
    return struct.pack("<BIdd", 1, 1, x, y)


def wkb_line(points: list[tuple[float, float]]) -> bytes:
    return struct.pack("<BII", 1, 2, len(points)) + b"".join(struct.pack("<dd", *p) for p in points)


def row(i: int, version: int = 0) -> dict:
    """Row ``i`` as a client means it (None: null); ``version`` changes its values (upserts)."""
    v = i + 1000 * version
    clips = [{LEN: v * 10 + k, EMB: [float(k), float(-v)]} for k in range(v % (MAX_CLIPS + 1))]
    place = None if v % 3 == 0 else (wkb_point(v, -v / 2) if v % 2 else wkb_line([(0, 0), (v, v + 0.25)]))
    return {
        "pk": i, "title": f"title {v}", "body": None if v % 4 == 1 else f"text {v} " * (v % 3 + 1),
        "at": None if v % 5 == 2 else 1_700_000_000_000_000 + v * 1_000_003, "place": place,
        "tenant": v % 7, "score": None if v % 6 == 5 else float(np.float32(v / 4)),
        "tags": None if v % 5 == 4 else [f"t{j}" for j in range(v % 4)],
        "doc": None if v % 7 == 3 else json.dumps({"v": v, "even": v % 2 == 0}),
        "vec": [float(np.float32(x)) for x in (v, v + 0.5, -v, 0.25)],
        "qvec": [(v * 7 + j) % 256 - 128 for j in range(QVEC_DIM)],
        "flag": None if v % 4 == 2 else v % 2 == 0, "$meta": json.dumps({"extra": v}), STRUCT: clips,
    }


def expected_row(r: dict) -> dict:
    """``r`` as the insert table holds it (``read_table(...).to_pylist()``): a Timestamptz as an
    aware datetime in UTC, a score not sent as its default, the rest as the client meant it."""
    out = dict(r)
    if out["score"] is None:
        out["score"] = SCORE_DEFAULT
    if out["at"] is not None:
        out["at"] = EPOCH + datetime.timedelta(microseconds=out["at"])
    return out


# -- the wire --------------------------------------------------------------------------------------
def _scalar(fd: schema_pb2.FieldData, slot: str, values: list, zero) -> None:
    """Values in the proxy's full form: a placeholder where null, ``valid_data`` when nullable."""
    getattr(fd.scalars, slot).data.extend(zero if v is None else v for v in values)


def _nullable(fd: schema_pb2.FieldData, values: list) -> schema_pb2.FieldData:
    fd.valid_data.extend(v is not None for v in values)
    return fd


def field_data(rows: list[dict]) -> list[schema_pb2.FieldData]:
    """The InsertRequest's ``fields_data`` for ``rows``, as the 2.6 proxy sends them."""
    col = {name: [r[name] for r in rows] for name in COLUMNS}
    out = []

    def add(fid: int, name: str, t: int) -> schema_pb2.FieldData:
        fd = schema_pb2.FieldData(field_id=fid, field_name=name, type=t)
        out.append(fd)
        return fd

    add(PK, "pk", DataType.Int64).scalars.long_data.data.extend(col["pk"])
    add(TITLE, "title", DataType.VarChar).scalars.string_data.data.extend(col["title"])
    _scalar(_nullable(add(BODY, "body", DataType.Text), col["body"]), "string_data", col["body"], "")
    _scalar(_nullable(add(AT, "at", DataType.Timestamptz), col["at"]), "timestamptz_data", col["at"], 0)
    _scalar(_nullable(add(PLACE, "place", DataType.Geometry), col["place"]), "geometry_data", col["place"], b"")
    add(TENANT, "tenant", DataType.Int64).scalars.long_data.data.extend(col["tenant"])
    # A field with a default value: the proxy puts the default in each null's slot and marks every
    # row valid (``FillWithDefaultValue``), so no null of it reaches the channel.
    score = add(SCORE, "score", DataType.Float)
    score.scalars.float_data.data.extend(SCORE_DEFAULT if v is None else v for v in col["score"])
    score.valid_data.extend([True] * len(rows))
    tags = _nullable(add(TAGS, "tags", DataType.Array), col["tags"])
    tags.scalars.array_data.element_type = DataType.VarChar
    for value in col["tags"]:
        tags.scalars.array_data.data.add().string_data.data.extend(value or [])
    _scalar(_nullable(add(DOC, "doc", DataType.JSON), col["doc"]), "json_data",
            [None if d is None else d.encode() for d in col["doc"]], b"")
    vec = add(VEC, "vec", DataType.FloatVector).vectors
    vec.dim = VEC_DIM
    vec.float_vector.data.extend(x for v in col["vec"] for x in v)
    qvec = add(QVEC, "qvec", DataType.Int8Vector).vectors
    qvec.dim = QVEC_DIM
    qvec.int8_vector = np.asarray(col["qvec"], dtype=np.int8).tobytes()
    _scalar(_nullable(add(FLAG, "flag", DataType.Bool), col["flag"]), "bool_data", col["flag"], False)
    meta = add(META, "$meta", DataType.JSON)
    meta.is_dynamic = True
    meta.scalars.json_data.data.extend(m.encode() for m in col["$meta"])
    # The struct array, flattened by the proxy: a column per sub-field.
    lens = add(LEN_ID, f"{STRUCT}[{LEN}]", DataType.Array)
    lens.scalars.array_data.element_type = DataType.Int32
    embs = add(EMB_ID, f"{STRUCT}[{EMB}]", DataType.ArrayOfVector).vectors
    embs.dim = EMB_DIM
    embs.vector_array.dim, embs.vector_array.element_type = EMB_DIM, DataType.FloatVector
    for clips in col[STRUCT]:
        lens.scalars.array_data.data.add().int_data.data.extend(c[LEN] for c in clips)
        one = embs.vector_array.data.add(dim=EMB_DIM)
        one.float_vector.data.extend(x for c in clips for x in c[EMB])
    return out


def insert_request(rows: list[dict], *, collection_id: int, partition_id: int, shard: str = "",
                   row_ids: list[int] | None = None, timestamps: list[int] | None = None) -> msg_pb2.InsertRequest:
    """An InsertRequest of ``rows`` as the 2.6 proxy sends it (a streaming node's reader sets its
    timestamps and segment from the message's properties)."""
    n = len(rows)
    return msg_pb2.InsertRequest(
        base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=shard, collection_name="every26",
        collectionID=collection_id, partitionID=partition_id, num_rows=n, version=msg_pb2.InsertDataVersion.ColumnBased,
        rowIDs=row_ids if row_ids is not None else [r["pk"] for r in rows], timestamps=timestamps or [],
        fields_data=field_data(rows))
