"""Everything one flowgraph's Spark tasks need, passed to the data sources as one option."""

from __future__ import annotations

import base64
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from functools import cached_property

from ..storage.channel_state import ChannelState
from ..storage.layout import StorageLayout
from ..wire.milvus_proto import schema_pb2
from ..wire.schema import CollectionLayout


@dataclass
class FlowgraphSpec:
    vchannel: str
    pchannel: str
    collection_id: int
    schema_b64: str              # serialized schema.CollectionSchema
    bootstrap: str               # Kafka bootstrap servers
    storage_root: str
    context_file: str            # driver-local JSON: the ChannelState handed from sink to source
    start_offset: int
    max_messages: int = 200
    max_bytes: int = 256 << 20
    checkpoint_interval_ms: int = 10_000
    splits: int = 2
    partition: int = 0
    delete_watermark: int = 0
    quarantine_watermark: int = 0
    fence: dict | None = None    # OwnershipFence arguments, None when no etcd (tests, tools)
    handoff_dir: str | None = None  # host-local directory for payloads (flowgraph.handoff), None: via the JVM
    log_level: str = "INFO"      # of the sink's commit process (the driver's deltanode level)

    def to_option(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_option(cls, text: str) -> "FlowgraphSpec":
        return cls(**json.loads(text))

    @cached_property
    def schema(self) -> schema_pb2.CollectionSchema:
        return schema_pb2.CollectionSchema.FromString(base64.b64decode(self.schema_b64))

    @cached_property
    def layout(self) -> CollectionLayout:
        return CollectionLayout.from_proto(self.schema)

    @property
    def storage(self) -> StorageLayout:
        return StorageLayout(self.storage_root)

    def make_fence(self):
        if not self.fence:
            return None
        from ..etcd.fence import OwnershipFence
        return OwnershipFence(**self.fence)


def encode_schema(schema: schema_pb2.CollectionSchema) -> str:
    return base64.b64encode(schema.SerializeToString()).decode()


def save_state(path: str, state: ChannelState) -> None:
    """Atomically replace the context file (the source reads it when planning a batch)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state-")
    with os.fdopen(fd, "w") as f:
        f.write(state.to_json())
    os.replace(tmp, path)


class StateFile:
    """Reads the context file, re-reading only when it changed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._state: ChannelState | None = None

    def load(self) -> ChannelState:
        st = os.stat(self.path)
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp or self._state is None:
            with open(self.path) as f:
                self._state = ChannelState.from_json(f.read())
            self._stamp = stamp
        return self._state
