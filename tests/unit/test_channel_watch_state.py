"""The fence's hand-written ChannelWatchInfo.state decoder agrees with protobuf."""

from __future__ import annotations

import pytest
from pymilvus.grpc_gen import msg_pb2, schema_pb2

from deltanode.etcd.fence import _watch_state
from deltanode.wire.datapb import (
    ChannelWatchInfo,
    ChannelWatchState,
    SegmentInfo,
    VchannelInfo,
)


def full_info(state: int) -> ChannelWatchInfo:
    vchan = VchannelInfo(collectionID=448712345678901234, channelName="by-dev-rootcoord-dml_3_1v0",
                         seek_position=msg_pb2.MsgPosition(channel_name="x", msgID=b"\x00" * 300,
                                                           timestamp=2**62),
                         unflushedSegments=[SegmentInfo(ID=5, num_of_rows=-1)],
                         flushedSegmentIds=[1, 2, 3])
    return ChannelWatchInfo(vchan=vchan, startTs=1_700_000_000, state=state, timeoutTs=-5,
                            schema=schema_pb2.CollectionSchema(name="c" * 200), progress=7, opID=-1)


@pytest.mark.parametrize("state", range(8))
def test_decoded_state_matches_protobuf(state):
    data = full_info(state).SerializeToString()
    assert _watch_state(data) == ChannelWatchInfo.FromString(data).state == state


def test_absent_state_is_uncomplete():
    assert _watch_state(b"") == ChannelWatchState.Uncomplete


@pytest.mark.parametrize("data", [b"\x18", b"\x0a\x05ab", b"\x0b"])
def test_malformed_bytes_are_rejected(data):
    with pytest.raises(ValueError):
        _watch_state(data)
