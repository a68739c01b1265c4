"""The pipeline's compaction targets take the newest schema of a collection's flowgraphs: after a
field is added they may briefly write with different ones, and a rewrite with an older one would
drop the new column from the files it rewrites."""

from __future__ import annotations

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.table_schema import recorded_schema
from deltanode.mq.broker import Broker
from deltanode.pipeline.pipeline import Pipeline
from deltanode.state.commit import Watermarks
from deltanode.vchannel.flowgraph import VchannelFlowgraph
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.schema import CollectionLayout, schema_from_json

CID = 7
FIELDS = [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
          {"name": "vec", "data_type": "FloatVector", "dim": 2}]
OLD = schema_from_json({"fields": FIELDS}, "c")
NEW = schema_from_json({"fields": [*FIELDS, {"name": "note", "data_type": "VarChar", "max_length": 8,
                                             "nullable": True}]}, "c")
NEW.version = 1


class _DueSyncs:
    """The sync manager's answer for due collections (pure bookkeeping here: no commit is made)."""

    def __init__(self, committer: object) -> None:
        self.committer = committer

    def take_due(self, min_new_files: int) -> dict[int, object]:
        return {CID: self.committer}


def flowgraph(k: int, schema) -> VchannelFlowgraph:
    """A running flowgraph of vchannel ``k`` with one growing segment, 100 + k."""
    info = VchannelInfo(collectionID=CID, channelName=f"dn-dml_{k}_{CID}v{k}")
    info.unflushedSegments.add(ID=100 + k, partitionID=1, collectionID=CID)
    fg = VchannelFlowgraph(info, schema, node_id=1)
    fg.load(None, Watermarks(), 0.0)
    return fg


@pytest.mark.parametrize("order", [(OLD, NEW), (NEW, OLD)])
def test_a_collections_compaction_target_has_the_newest_schema_of_its_flowgraphs(tmp_path, order):
    pipe = Pipeline(None, StorageLayout(str(tmp_path)), Broker("kafka", "127.0.0.1:1"))
    committer = object()
    pipe._syncs = _DueSyncs(committer)   # type: ignore[assignment]
    for k, schema in enumerate(order):
        pipe.registry.add(flowgraph(k, schema))
    [target] = pipe.compaction_targets(1)
    assert target.committer is committer and target.pk == "pk"
    newest = CollectionLayout.from_proto(NEW).insert_schema()
    assert "note" in newest.names and target.insert_schema == newest
    assert target.schema is not None and target.schema.columns == newest
    assert recorded_schema(target.schema.configuration()) == NEW
    assert target.segments == {100: f"dn-dml_0_{CID}v0", 101: f"dn-dml_1_{CID}v1"}
