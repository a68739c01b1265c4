"""A Milvus 2.3 client for the integration tests, run in the side environment .venv-milvus.

pymilvus 2.3.x needs protobuf < 5 and the tests run with protobuf 7, so the client is two halves in
this one file:

- ``python milvus_client.py --uri HOST:PORT`` under ``.venv-milvus/bin/python`` (build/milvus_env.sh)
  is a JSON-lines server: one request a line on stdin, ``{"id": N, "method": "...", "args": {...}}``,
  one reply a line on stdout, ``{"id": N, "ok": true, "result": ...}`` or
  ``{"id": N, "ok": false, "error": "..."}``. It talks to Milvus with pymilvus's gRPC stub and its
  own protobuf messages (pymilvus 2.3.8 has no Float16Vector type, and its ORM refuses collections
  that have one), so every type Milvus 2.3.5 accepts goes through.
- ``MilvusClient`` (importable from the main venv: no pymilvus there) spawns that server and exposes
  the operations the tests need.

Values cross JSON as: BinaryVector and Float16Vector as base64 strings (a Float16Vector may also be
given as a list of numbers; it is sent as float16), JSON fields as any JSON value, Float/Double as
numbers (a Float comes back as its float32 value), VarChar as strings, Array as lists.
"""

from __future__ import annotations

import base64
import collections
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIDE_PYTHON = ROOT / ".venv-milvus" / "bin" / "python"

# Milvus 2.3 caps offset + limit of a query at 16,384 (proxy: "invalid max query result window"); a
# query pages by primary key: results with a limit come back sorted by primary key.
PAGE = 16384
VECTOR_INDEX = {"FloatVector": ("FLAT", "L2"), "Float16Vector": ("FLAT", "L2"),
                "BinaryVector": ("BIN_FLAT", "HAMMING")}


class MilvusClientError(RuntimeError):
    """A request failed in Milvus (or in the client server), or the client server died."""


class MilvusClient:
    """Spawns the JSON-lines server under .venv-milvus and calls it. Every call waits at most
    ``timeout`` seconds (a call's own ``timeout=`` overrides it), and raises MilvusClientError with
    the server's stderr tail when it failed, timed out or the server died."""

    def __init__(self, uri: str, *, timeout: float = 60.0, python: str | Path | None = None) -> None:
        self.uri = uri
        self.timeout = timeout
        python = Path(python or SIDE_PYTHON)
        if not python.exists():
            raise MilvusClientError(f"no {python}: run build/milvus_env.sh (it makes .venv-milvus)")
        from deltanode.standalone.services import die_with_parent
        self._proc = subprocess.Popen(
            [str(python), str(Path(__file__).resolve()), "--uri", uri],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=die_with_parent, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._ids = itertools.count(1)
        self._replies: queue.Queue = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=60)
        self._lock = threading.Lock()
        threading.Thread(target=self._read_stdout, daemon=True, name="milvus-client-out").start()
        threading.Thread(target=self._read_stderr, daemon=True, name="milvus-client-err").start()
        try:
            self.server_version = self.call("ping")
        except BaseException:
            self.close()
            raise

    # --- plumbing ---------------------------------------------------------------------------
    def _read_stdout(self) -> None:
        for line in self._proc.stdout:
            try:
                self._replies.put(json.loads(line))
            except ValueError:
                self._stderr.append(f"(stdout, not JSON) {line.decode(errors='replace').rstrip()}")
        self._replies.put(None)  # EOF: the server is gone

    def _read_stderr(self) -> None:
        for line in self._proc.stderr:
            self._stderr.append(line.decode(errors="replace").rstrip())

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    def _died(self, method: str) -> MilvusClientError:
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        return MilvusClientError(f"the Milvus client server died (exit code {self._proc.poll()}) "
                                 f"during {method}; its stderr:\n{self.stderr_tail()}")

    def call(self, method: str, timeout: float | None = None, **args):
        """One request; its result, or MilvusClientError."""
        timeout = self.timeout if timeout is None else timeout
        with self._lock:
            if self._proc.poll() is not None:
                raise self._died(method)
            rid = next(self._ids)
            line = json.dumps({"id": rid, "method": method, "args": args, "timeout": timeout},
                              default=_json_default)
            try:
                self._proc.stdin.write(line.encode() + b"\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise self._died(method) from None
            deadline = _now() + timeout
            while True:
                try:
                    reply = self._replies.get(timeout=max(0.0, deadline - _now()))
                except queue.Empty:
                    raise MilvusClientError(
                        f"{method} got no answer within {timeout:.0f} s (uri {self.uri}); the client "
                        f"server's stderr:\n{self.stderr_tail()}") from None
                if reply is None:
                    self._replies.put(None)
                    raise self._died(method)
                if reply.get("id") != rid:
                    continue  # the late answer to a request that timed out
                if reply.get("ok"):
                    return reply.get("result")
                raise MilvusClientError(f"{method} failed: {reply.get('error')}")

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for f in (self._proc.stdout, self._proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self) -> MilvusClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- operations ---------------------------------------------------------------------------
    def create_collection(self, name: str, fields: list[dict], *, shards: int = 1,
                          enable_dynamic_field: bool = False, num_partitions: int | None = None,
                          load: bool | None = None, timeout: float | None = None) -> dict:
        """Create ``name`` (fields: dicts with name, data_type as Milvus names it, e.g. "Int64",
        "VarChar", "FloatVector", "Array"; is_primary_key, auto_id, dim, max_length, element_type,
        max_capacity, is_partition_key), index every vector field (FLAT/L2, BIN_FLAT/HAMMING) and
        load it, so it can be queried. Returns describe(name).

        Milvus 2.3.5 allows one vector field a collection. It creates a Float16Vector collection
        and takes inserts into it, but its QueryNode panics on them ("unsupported data type:
        Float16Vector") and the whole server dies: such a collection is not loaded unless
        ``load=True`` says so (no query or count on it then)."""
        return self.call("create_collection", timeout, name=name, fields=fields, shards=shards,
                         enable_dynamic_field=enable_dynamic_field, num_partitions=num_partitions,
                         load=load)

    def describe(self, name: str, timeout: float | None = None) -> dict:
        """{"collection_id", "vchannels", "pchannels", "fields": [{name, field_id, data_type,
        ...}], "partitions": {name: id}, "created_timestamp", "shards"}"""
        return self.call("describe", timeout, name=name)

    def load(self, name: str, timeout: float | None = None) -> None:
        """Load ``name`` and wait until it is (after a restart Milvus reloads what was loaded, in
        the background: a query before that fails with "collection not loaded")."""
        self.call("load", timeout, name=name)

    def release(self, name: str, timeout: float | None = None) -> None:
        self.call("release", timeout, name=name)

    def create_partition(self, name: str, partition: str, timeout: float | None = None) -> dict:
        """Create and load ``partition``; returns {"partition_id"}."""
        return self.call("create_partition", timeout, name=name, partition=partition)

    def drop_partition(self, name: str, partition: str, timeout: float | None = None) -> None:
        self.call("drop_partition", timeout, name=name, partition=partition)

    def drop_collection(self, name: str, timeout: float | None = None) -> None:
        self.call("drop_collection", timeout, name=name)

    def insert(self, name: str, rows: list[dict], partition: str | None = None,
               timeout: float | None = None) -> dict:
        """{"insert_count", "primary_keys", "timestamp"}"""
        return self.call("insert", timeout, name=name, rows=rows, partition=partition)

    def upsert(self, name: str, rows: list[dict], partition: str | None = None,
               timeout: float | None = None) -> dict:
        """{"upsert_count", "primary_keys", "timestamp"}"""
        return self.call("upsert", timeout, name=name, rows=rows, partition=partition)

    def delete(self, name: str, expr: str, partition: str | None = None,
               timeout: float | None = None) -> dict:
        """{"delete_count", "primary_keys", "timestamp"}"""
        return self.call("delete", timeout, name=name, expr=expr, partition=partition)

    def query(self, name: str, expr: str = "", output_fields: list[str] | None = None,
              partition_names: list[str] | None = None, timeout: float | None = None) -> list[dict]:
        """Every row matching ``expr`` (Strong consistency), sorted by primary key; dynamic
        fields flattened into the rows; bytes as base64."""
        return self.call("query", timeout, name=name, expr=expr,
                         output_fields=output_fields or ["*"], partition_names=partition_names)

    def count(self, name: str, expr: str = "", partition_names: list[str] | None = None,
              timeout: float | None = None) -> int:
        """count(*) with Strong consistency."""
        return self.call("count", timeout, name=name, expr=expr, partition_names=partition_names)

    def flush(self, name: str, timeout: float | None = None) -> None:
        self.call("flush", timeout, name=name)

    def compact(self, name: str, timeout: float | None = None) -> dict:
        """A manual compaction of ``name`` (the proxy's ManualCompaction): Milvus merges its small
        Flushed segments and rewrites those with many deletes. Returns {"compaction_id",
        "plan_count"}; the compaction runs on in the background: wait_compaction waits for it."""
        return self.call("compact", timeout, name=name)

    def wait_compaction(self, compaction_id: int, timeout: float | None = None) -> dict:
        """Until the compaction ``compaction_id`` is Completed (GetCompactionState), at most
        ``timeout`` s. Returns its plan counts: {"state", "executing", "completed", "failed",
        "timeout"}; a plan that failed or timed out is an error."""
        return self.call("wait_compaction", timeout, compaction_id=compaction_id)

    def list_collections(self, timeout: float | None = None) -> list[str]:
        return self.call("list_collections", timeout)


def _now() -> float:
    import time
    return time.monotonic()


def _json_default(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


# ================================================================================================
# The server half: runs under .venv-milvus with pymilvus 2.3.8. Nothing below is used in .venv.
# ================================================================================================

class _Server:
    def __init__(self, uri: str) -> None:
        from pymilvus import connections
        from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2
        self.pb, self.schema_pb, self.common_pb = milvus_pb2, schema_pb2, common_pb2
        connections.connect(alias="default", uri=f"http://{uri}", timeout=60)
        self.handler = connections._fetch_handler("default")
        self.stub = self.handler._stub
        self.schemas: dict[str, object] = {}  # collection name -> CollectionSchema (proto)

    # --- helpers --------------------------------------------------------------------------
    def check(self, status, what: str) -> None:
        if status.error_code != 0 or getattr(status, "code", 0) != 0:
            raise RuntimeError(f"{what}: {status.reason or 'error'} (error_code {status.error_code}, "
                               f"code {getattr(status, 'code', 0)})")

    def dtype(self, name) -> int:
        """A DataType by Milvus's proto name ("FloatVector") or pymilvus's ("FLOAT_VECTOR")."""
        if isinstance(name, int):
            return name
        want = str(name).replace("_", "").lower()
        for n, v in self.schema_pb.DataType.items():
            if n.lower() == want:
                return v
        raise ValueError(f"unknown data_type {name!r}")

    def dname(self, value: int) -> str:
        return self.schema_pb.DataType.Name(value)

    def schema(self, name: str, timeout: float, refresh: bool = False):
        if refresh or name not in self.schemas:
            d = self.stub.DescribeCollection(self.pb.DescribeCollectionRequest(collection_name=name),
                                             timeout=timeout)
            self.check(d.status, f"describe collection {name}")
            self.schemas[name] = d.schema
        return self.schemas[name]

    def pk_field(self, schema):
        return next(f for f in schema.fields if f.is_primary_key)

    # --- requests -----------------------------------------------------------------------------
    def ping(self, timeout: float) -> str:
        return self.handler.get_server_version(timeout=timeout)

    def list_collections(self, timeout: float) -> list[str]:
        return self.handler.list_collections(timeout=timeout)

    def create_collection(self, timeout: float, name: str, fields: list[dict], shards: int = 1,
                          enable_dynamic_field: bool = False, num_partitions=None,
                          load=None) -> dict:
        pb = self.schema_pb
        schema = pb.CollectionSchema(name=name, enable_dynamic_field=enable_dynamic_field)
        for f in fields:
            field = schema.fields.add(name=f["name"], data_type=self.dtype(f["data_type"]),
                                      is_primary_key=bool(f.get("is_primary_key")),
                                      autoID=bool(f.get("auto_id")),
                                      is_partition_key=bool(f.get("is_partition_key")),
                                      description=f.get("description", ""))
            if f.get("element_type") is not None:
                field.element_type = self.dtype(f["element_type"])
            for key in ("dim", "max_length", "max_capacity"):
                if f.get(key) is not None:
                    field.type_params.add(key=key, value=str(f[key]))
        req = self.pb.CreateCollectionRequest(collection_name=name, schema=schema.SerializeToString(),
                                              shards_num=shards)
        if num_partitions is not None:
            req.num_partitions = num_partitions
        self.check(self.stub.CreateCollection(req, timeout=timeout), f"create collection {name}")
        self.schemas.pop(name, None)
        schema = self.schema(name, timeout, refresh=True)
        for field in schema.fields:
            kind = self.dname(field.data_type)
            if kind in VECTOR_INDEX:
                index_type, metric = VECTOR_INDEX[kind]
                params = {"index_type": index_type, "metric_type": metric, "params": "{}"}
                r = self.stub.CreateIndex(self.pb.CreateIndexRequest(
                    collection_name=name, field_name=field.name, index_name=f"{field.name}_idx",
                    extra_params=[self.common_pb.KeyValuePair(key=k, value=v)
                                  for k, v in params.items()]), timeout=timeout)
                self.check(r, f"create index on {name}.{field.name}")
        if load is None:  # 2.3.5's QueryNode panics on Float16Vector inserts: not loaded
            load = not any(self.dname(f.data_type) == "Float16Vector" for f in schema.fields)
        if load:
            self.handler.load_collection(name, replica_number=1, timeout=timeout)
        return self.describe(timeout, name)

    def describe(self, timeout: float, name: str) -> dict:
        d = self.stub.DescribeCollection(self.pb.DescribeCollectionRequest(collection_name=name),
                                         timeout=timeout)
        self.check(d.status, f"describe collection {name}")
        self.schemas[name] = d.schema
        parts = self.stub.ShowPartitions(self.pb.ShowPartitionsRequest(collection_name=name),
                                         timeout=timeout)
        self.check(parts.status, f"show partitions of {name}")
        fields = []
        for f in d.schema.fields:
            fd = {"name": f.name, "field_id": f.fieldID, "data_type": self.dname(f.data_type),
                  "is_primary_key": f.is_primary_key, "auto_id": f.autoID,
                  "is_partition_key": f.is_partition_key, "is_dynamic": f.is_dynamic}
            if f.element_type:
                fd["element_type"] = self.dname(f.element_type)
            for kv in f.type_params:
                fd[kv.key] = int(kv.value) if kv.value.isdigit() else kv.value
            fields.append(fd)
        return {"collection_id": d.collectionID, "vchannels": list(d.virtual_channel_names),
                "pchannels": list(d.physical_channel_names), "shards": d.shards_num,
                "created_timestamp": d.created_timestamp, "fields": fields,
                "enable_dynamic_field": d.schema.enable_dynamic_field,
                "partitions": dict(zip(parts.partition_names, parts.partitionIDs))}

    def load(self, timeout: float, name: str) -> None:
        self.handler.load_collection(name, replica_number=1, timeout=timeout)

    def release(self, timeout: float, name: str) -> None:
        self.handler.release_collection(name, timeout=timeout)

    def create_partition(self, timeout: float, name: str, partition: str) -> dict:
        self.handler.create_partition(name, partition, timeout=timeout)
        self.handler.load_partitions(name, [partition], replica_number=1, timeout=timeout)
        return {"partition_id": self.describe(timeout, name)["partitions"][partition]}

    def drop_partition(self, timeout: float, name: str, partition: str) -> None:
        self.handler.release_partitions(name, [partition], timeout=timeout)
        self.handler.drop_partition(name, partition, timeout=timeout)

    def drop_collection(self, timeout: float, name: str) -> None:
        self.handler.drop_collection(name, timeout=timeout)
        self.schemas.pop(name, None)

    def _columns(self, schema, rows: list[dict]) -> list:
        """Column-based FieldData for ``rows`` (the way pymilvus sends them); keys that are no
        field go to the dynamic field ``$meta`` when the collection has one."""
        pb = self.schema_pb
        out, known = [], set()
        for f in schema.fields:
            known.add(f.name)
            if f.is_dynamic:  # DescribeCollection leaves it out in 2.3; enable_dynamic_field says
                continue
            if f.autoID:
                continue
            values = []
            for i, row in enumerate(rows):
                if f.name not in row:
                    raise ValueError(f"row {i} has no value for field {f.name!r}")
                values.append(row[f.name])
            out.append(self._field_data(f, values))
        if schema.enable_dynamic_field:
            fd = pb.FieldData(field_name="$meta", type=pb.JSON, is_dynamic=True)
            fd.scalars.json_data.data.extend(
                json.dumps({k: v for k, v in row.items() if k not in known}).encode() for row in rows)
            out.append(fd)
        else:
            extra = {k for row in rows for k in row} - known
            if extra:
                raise ValueError(f"fields {sorted(extra)} are not in the schema and the collection "
                                 f"has no dynamic field")
        return out

    def _field_data(self, f, values: list):
        pb = self.schema_pb
        kind = self.dname(f.data_type)
        fd = pb.FieldData(field_name=f.name, type=f.data_type)
        dim = next((int(kv.value) for kv in f.type_params if kv.key == "dim"), None)
        if kind == "FloatVector":
            fd.vectors.dim = dim
            fd.vectors.float_vector.data.extend(float(x) for v in values for x in v)
        elif kind == "BinaryVector":
            fd.vectors.dim = dim
            fd.vectors.binary_vector = b"".join(_bytes(v, dim // 8, f.name) for v in values)
        elif kind == "Float16Vector":
            fd.vectors.dim = dim
            fd.vectors.float16_vector = b"".join(_f16(v, dim, f.name) for v in values)
        elif kind == "Array":
            fd.scalars.array_data.element_type = f.element_type
            for v in values:
                fd.scalars.array_data.data.append(self._scalar(f.element_type, v))
        else:
            fd.scalars.CopyFrom(self._scalar(f.data_type, values))
        return fd

    def _scalar(self, data_type: int, values: list):
        pb = self.schema_pb
        kind = self.dname(data_type)
        s = pb.ScalarField()
        if kind == "Bool":
            s.bool_data.data.extend(bool(v) for v in values)
        elif kind in ("Int8", "Int16", "Int32"):
            s.int_data.data.extend(int(v) for v in values)
        elif kind == "Int64":
            s.long_data.data.extend(int(v) for v in values)
        elif kind == "Float":
            s.float_data.data.extend(float(v) for v in values)
        elif kind == "Double":
            s.double_data.data.extend(float(v) for v in values)
        elif kind in ("VarChar", "String"):
            s.string_data.data.extend(str(v) for v in values)
        elif kind == "JSON":
            s.json_data.data.extend(json.dumps(v).encode() for v in values)
        else:
            raise ValueError(f"no scalar encoding for {kind}")
        return s

    def _mutation(self, r, what: str, count_key: str, count: int) -> dict:
        self.check(r.status, what)
        ids = r.IDs.int_id.data if r.IDs.HasField("int_id") else r.IDs.str_id.data
        return {count_key: count, "primary_keys": list(ids), "timestamp": r.timestamp}

    def _batches(self, rows: list[dict]):
        """Slices of ``rows`` of about 16 MB each (the proxy takes 64 MB a request)."""
        if not rows:
            return
        per_row = max(1, len(json.dumps(rows[: min(len(rows), 50)])) // min(len(rows), 50))
        step = max(1, (16 << 20) // per_row)
        for i in range(0, len(rows), step):
            yield rows[i:i + step]

    def _write(self, timeout: float, kind: str, name: str, rows: list[dict], partition) -> dict:
        schema = self.schema(name, timeout)
        total = {f"{kind}_count": 0, "primary_keys": [], "timestamp": 0}
        for batch in self._batches(rows):
            cls = self.pb.InsertRequest if kind == "insert" else self.pb.UpsertRequest
            req = cls(collection_name=name, partition_name=partition or "",
                      fields_data=self._columns(schema, batch), num_rows=len(batch))
            r = (self.stub.Insert if kind == "insert" else self.stub.Upsert)(req, timeout=timeout)
            count = r.insert_cnt if kind == "insert" else r.upsert_cnt
            res = self._mutation(r, f"{kind} into {name}", f"{kind}_count", count)
            total[f"{kind}_count"] += res[f"{kind}_count"]
            total["primary_keys"] += res["primary_keys"]
            total["timestamp"] = res["timestamp"]
        return total

    def insert(self, timeout: float, name: str, rows: list[dict], partition=None) -> dict:
        return self._write(timeout, "insert", name, rows, partition)

    def upsert(self, timeout: float, name: str, rows: list[dict], partition=None) -> dict:
        return self._write(timeout, "upsert", name, rows, partition)

    def delete(self, timeout: float, name: str, expr: str, partition=None) -> dict:
        req = self.pb.DeleteRequest(collection_name=name, partition_name=partition or "", expr=expr)
        r = self.stub.Delete(req, timeout=timeout)
        return self._mutation(r, f"delete from {name} where {expr}", "delete_count", r.delete_cnt)

    def _query(self, timeout: float, name: str, expr: str, output_fields, partition_names, limit=None):
        from pymilvus.client.prepare import Prepare
        kwargs = {"consistency_level": "Strong"}
        if limit is not None:
            kwargs["limit"] = limit
        req = Prepare.query_request(name, expr, output_fields, partition_names or [], **kwargs)
        r = self.stub.Query(req, timeout=timeout)
        self.check(r.status, f"query {name} where {expr!r}")
        return r

    def count(self, timeout: float, name: str, expr: str = "", partition_names=None) -> int:
        r = self._query(timeout, name, expr, ["count(*)"], partition_names)
        return int(r.fields_data[0].scalars.long_data.data[0])

    def query(self, timeout: float, name: str, expr: str = "", output_fields=None,
              partition_names=None) -> list[dict]:
        schema = self.schema(name, timeout)
        pk = self.pk_field(schema)
        str_pk = self.dname(pk.data_type) == "VarChar"
        fields = list(output_fields or ["*"])
        if "*" not in fields and pk.name not in fields:
            fields.append(pk.name)
        rows: list[dict] = []
        last = None
        while True:
            cond = expr
            if last is not None:
                after = f"{pk.name} > {json.dumps(last) if str_pk else last}"
                cond = f"({expr}) and {after}" if expr else after
            elif not cond:  # a query with no expression must have a limit: it has
                cond = f'{pk.name} != ""' if str_pk else f"{pk.name} < {2**63 - 1}"
            r = self._query(timeout, name, cond, fields, partition_names, limit=PAGE)
            page = self._rows(schema, r)
            keys = [row[pk.name] for row in page]
            if keys != sorted(keys) or (last is not None and keys and keys[0] <= last):
                raise RuntimeError(f"query {name}: a page came back out of primary-key order; "
                                   f"paging by primary key needs it sorted")
            rows += page
            if len(page) < PAGE:
                return rows
            last = keys[-1]

    def _rows(self, schema, r) -> list[dict]:
        by_name = {f.name: f for f in schema.fields}
        columns = []
        n = None
        for fd in r.fields_data:
            values = self._values(fd, by_name.get(fd.field_name))
            columns.append((fd, values))
            n = len(values) if n is None else n
            if len(values) != n:
                raise RuntimeError(f"query result columns of different lengths ({fd.field_name})")
        rows = [dict() for _ in range(n or 0)]
        columns.sort(key=lambda c: bool(c[0].is_dynamic or c[0].field_name == "$meta"))  # fields first
        for fd, values in columns:
            for row, v in zip(rows, values):
                if fd.is_dynamic or fd.field_name == "$meta":
                    if isinstance(v, dict):
                        for k, x in v.items():
                            row.setdefault(k, x)
                else:
                    row[fd.field_name] = v
        return rows

    def _values(self, fd, field) -> list:
        kind = self.dname(fd.type)
        if kind in ("FloatVector", "BinaryVector", "Float16Vector"):
            dim = fd.vectors.dim
            if kind == "FloatVector":
                data = list(fd.vectors.float_vector.data)
                return [data[i:i + dim] for i in range(0, len(data), dim)]
            data = fd.vectors.binary_vector if kind == "BinaryVector" else fd.vectors.float16_vector
            width = dim // 8 if kind == "BinaryVector" else dim * 2
            return [base64.b64encode(data[i:i + width]).decode() for i in range(0, len(data), width)]
        if kind == "Array":
            element = fd.scalars.array_data.element_type or (field.element_type if field else 0)
            return [self._scalar_values(element, s) for s in fd.scalars.array_data.data]
        return self._scalar_values(fd.type, fd.scalars)

    def _scalar_values(self, data_type: int, s) -> list:
        kind = self.dname(data_type)
        if kind == "Bool":
            return list(s.bool_data.data)
        if kind in ("Int8", "Int16", "Int32"):
            return list(s.int_data.data)
        if kind == "Int64":
            return list(s.long_data.data)
        if kind == "Float":
            return list(s.float_data.data)
        if kind == "Double":
            return list(s.double_data.data)
        if kind in ("VarChar", "String"):
            return list(s.string_data.data)
        if kind == "JSON":
            return [json.loads(b) if b else None for b in s.json_data.data]
        # an array whose element type the reply left unset: take whichever list is filled
        for attr in ("long_data", "int_data", "string_data", "double_data", "float_data", "bool_data"):
            if s.HasField(attr):
                return list(getattr(s, attr).data)
        return []

    def flush(self, timeout: float, name: str) -> None:
        self.handler.flush([name], timeout=timeout)

    def compact(self, timeout: float, name: str) -> dict:
        cid = self.describe(timeout, name)["collection_id"]
        r = self.stub.ManualCompaction(self.pb.ManualCompactionRequest(collectionID=cid), timeout=timeout)
        self.check(r.status, f"compact {name}")
        return {"compaction_id": r.compactionID, "plan_count": r.compactionPlanCount}

    def wait_compaction(self, timeout: float, compaction_id: int) -> dict:
        import time
        deadline = time.monotonic() + timeout - 1  # answer before the caller gives up
        while True:
            r = self.stub.GetCompactionState(self.pb.GetCompactionStateRequest(compactionID=compaction_id),
                                             timeout=timeout)
            self.check(r.status, f"state of compaction {compaction_id}")
            out = {"state": self.common_pb.CompactionState.Name(r.state), "executing": r.executingPlanNo,
                   "completed": r.completedPlanNo, "failed": r.failedPlanNo, "timeout": r.timeoutPlanNo}
            if r.failedPlanNo or r.timeoutPlanNo:
                raise RuntimeError(f"compaction {compaction_id}: plans failed or timed out: {out}")
            if r.state == self.common_pb.CompactionState.Completed:
                return out
            if time.monotonic() > deadline:
                raise RuntimeError(f"compaction {compaction_id} not completed within {timeout:.0f} s: {out}")
            time.sleep(0.5)


def _bytes(v, width: int, field: str) -> bytes:
    b = base64.b64decode(v) if isinstance(v, str) else bytes(v)
    if len(b) != width:
        raise ValueError(f"{field}: a vector of {len(b)} bytes, the field takes {width}")
    return b


def _f16(v, dim: int, field: str) -> bytes:
    if isinstance(v, list):
        import numpy as np
        v = np.asarray(v, dtype=np.float16).tobytes()
    return _bytes(v, dim * 2, field)


def serve(uri: str) -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed by a library goes to stderr, never into the replies
    sys.stdout = sys.stderr
    try:
        server = _Server(uri)
    except Exception as e:  # noqa: BLE001 - report why, then exit
        print(f"milvus_client: cannot connect to Milvus at {uri}: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        return 1
    for line in sys.stdin:
        if not line.strip():
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            method = req["method"]
            if method.startswith("_") or not callable(getattr(server, method, None)) or method in (
                    "check", "dtype", "dname", "schema", "pk_field"):
                raise ValueError(f"unknown method {method!r}")
            result = getattr(server, method)(req.get("timeout") or 60.0, **req.get("args", {}))
            reply = {"id": rid, "ok": True, "result": result}
        except Exception as e:  # noqa: BLE001 - every failure goes back to the caller
            msg = str(e) or type(e).__name__
            reply = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {msg}"}
        out.write(json.dumps(reply, default=_json_default) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", required=True, help="HOST:PORT of Milvus's proxy")
    sys.exit(serve(p.parse_args().uri))
