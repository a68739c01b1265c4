"""Milvus's generated protobuf modules (milvus-proto, shipped in pymilvus), loaded lean.

``import pymilvus.grpc_gen.msg_pb2`` first runs ``pymilvus/__init__`` and
``grpc_gen/__init__``, which import pandas, grpc and the client: about 0.8 s. Spark starts
fresh Python workers for tasks and for every batch commit, so that cost would be paid per
micro-batch. The four modules DeltaNode uses depend only on protobuf and on each other, so
they are loaded from pymilvus's folder with bare package stand-ins instead. When pymilvus is
already imported (a process that uses the client), the real package is used as is; a process
that wants the client after the lean load asks ``client_package``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

_STAND_IN = "stand-in: see deltanode.wire.milvus_proto"


def _load() -> list[types.ModuleType]:
    if "pymilvus.grpc_gen" not in sys.modules:
        spec = importlib.util.find_spec("pymilvus")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("pymilvus is not installed: run build/bootstrap.sh")
        base = spec.submodule_search_locations[0]
        for name, path in (("pymilvus", base), ("pymilvus.grpc_gen", f"{base}/grpc_gen")):
            if name not in sys.modules:
                package = types.ModuleType(name, _STAND_IN)
                package.__path__ = [path]
                package.__package__ = name
                sys.modules[name] = package
    return [importlib.import_module(f"pymilvus.grpc_gen.{m}") for m in ("common_pb2", "schema_pb2", "msg_pb2",
                                                                         "milvus_pb2")]


common_pb2, schema_pb2, msg_pb2, milvus_pb2 = _load()


def client_package() -> types.ModuleType:
    """The real ``pymilvus`` package, with its client. The stand-ins make way: the real
    ``pymilvus.grpc_gen`` then imports the protobuf modules already loaded from ``sys.modules``,
    so their classes stay the ones this module handed out."""
    for name in ("pymilvus.grpc_gen", "pymilvus"):
        if getattr(sys.modules.get(name), "__doc__", None) == _STAND_IN:
            del sys.modules[name]
    return importlib.import_module("pymilvus")
