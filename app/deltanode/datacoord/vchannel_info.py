"""VchannelInfo for a channel hand-over, built from the Delta meta (never from a DataNode)."""

from __future__ import annotations

from collections.abc import Callable

from ..state.channel_state import ChannelState, SegmentState
from ..wire.datapb import SegmentInfo, VchannelInfo
from ..wire.milvus_proto import common_pb2, msg_pb2
from ..wire.positions import CODECS, PositionCodec
from .catalog import CollectionRecord, StartPosition

MilvusSegmentState = common_pb2.SegmentState


def vchannel_info(state: ChannelState | None, record: CollectionRecord, vchannel: str,
                  start: Callable[[], StartPosition], positions: PositionCodec = CODECS["kafka"]) -> VchannelInfo:
    """``state``: the vchannel's newest committed state (None: it never committed).

    Seek position: the channel checkpoint, else ``start()`` (the catalog's start position; asked
    only then), in the broker's msgID encoding (``positions``). Every position names the vchannel,
    as Milvus's do (the msgID is the pchannel's: the vchannel's name says which pchannel that is)."""

    def _position(offset: int, ts: int) -> msg_pb2.MsgPosition:
        return msg_pb2.MsgPosition(channel_name=vchannel, msgID=positions.to_msg_id(offset), timestamp=ts)

    info = VchannelInfo(collectionID=record.collection_id, channelName=vchannel)
    if state is None:
        first = start()
        info.seek_position.CopyFrom(_position(first.offset, first.ts))
        info.flushedSegmentIds.extend(first.flushed)
        info.unflushedSegmentIds.extend(first.unflushed)
        return info
    info.seek_position.CopyFrom(_position(state.checkpoint_offset, state.checkpoint_ts))
    for seg in state.segments.values():
        si = SegmentInfo(ID=seg.segment_id, collectionID=record.collection_id, partitionID=seg.partition_id,
                         insert_channel=vchannel, num_of_rows=seg.num_rows,
                         dml_position=_position(seg.dml_offset, seg.dml_ts),
                         start_position=_position(seg.start_offset, seg.start_ts))
        if seg.state == SegmentState.DROPPED:
            si.state = MilvusSegmentState.Dropped
            info.dropped_segments.append(si)
            info.dropped_segmentIds.append(seg.segment_id)
        elif seg.state == SegmentState.FLUSHED:
            si.state = MilvusSegmentState.Flushed
            info.flushedSegments.append(si)
            info.flushedSegmentIds.append(seg.segment_id)
        else:
            si.state = MilvusSegmentState.Sealed if seg.state == SegmentState.SEALED else MilvusSegmentState.Growing
            info.unflushedSegments.append(si)
            info.unflushedSegmentIds.append(seg.segment_id)
    return info
