"""Milvus's generated protobuf modules (milvus-proto, shipped in pymilvus), loaded lean.

``import pymilvus.grpc_gen.msg_pb2`` first runs ``pymilvus/__init__`` and
``grpc_gen/__init__``, which import pandas, grpc and the client: about 0.8 s. Spark starts
fresh Python workers for tasks and for every batch commit, so that cost would be paid per
micro-batch. The four modules DeltaNode uses depend only on protobuf and on each other, so
they are loaded from pymilvus's folder with bare package stand-ins instead. When pymilvus is
already imported (a process that uses the client), the real package is used as is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


def _load() -> list[types.ModuleType]:
    if "pymilvus.grpc_gen" not in sys.modules:
        spec = importlib.util.find_spec("pymilvus")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("pymilvus is not installed: run build/bootstrap.sh")
        base = spec.submodule_search_locations[0]
        for name, path in (("pymilvus", base), ("pymilvus.grpc_gen", f"{base}/grpc_gen")):
            if name not in sys.modules:
                package = types.ModuleType(name, "stand-in: see deltanode.wire.milvus_proto")
                package.__path__ = [path]
                package.__package__ = name
                sys.modules[name] = package
    return [importlib.import_module(f"pymilvus.grpc_gen.{m}") for m in ("common_pb2", "schema_pb2", "msg_pb2",
                                                                         "milvus_pb2")]


common_pb2, schema_pb2, msg_pb2, milvus_pb2 = _load()
