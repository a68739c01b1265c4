"""The state a vchannel's flowgraph starts from: Delta's if it committed before, else its VchannelInfo's.

Delta is the truth about how far a channel got: when the channel has committed before, the
flowgraph starts at its insert_log ``txn`` (exact offset) whatever the VchannelInfo says, since
a VchannelInfo may be older than the last commit of the previous owner.
"""

from __future__ import annotations

from ..executor.replay_filter import ReplayFilter
from ..failure.errors import BadInput, DeltaNodeError
from ..state.channel_state import ChannelState, SegmentMeta, SegmentState
from ..wire.datapb import VchannelInfo
from ..wire.names import pchannel_of
from ..wire.positions import CODECS, PositionCodec


class UnknownSegments(BadInput):
    """The VchannelInfo names segments by id only and Delta has no meta for them."""


class TopicRecreated(DeltaNodeError):
    """The pchannel topic is not the one the committed offsets are in (deleted and created again)."""


def check_topic(committed: ChannelState | None, topic_id: str) -> None:
    """Raise TopicRecreated when the broker's id of the pchannel topic (``topic_id``, "" if it gives
    none) differs from the one the vchannel committed under. The old messages are gone and the
    new topic's offsets restart at 0: read from the committed offset, once the new topic grew past
    it, the vchannel would skip the new topic's first messages without a word."""
    if committed is not None and committed.topic_id and topic_id and topic_id != committed.topic_id:
        raise TopicRecreated(
            f"{committed.vchannel}: the topic {committed.pchannel} was deleted and created again (its id is "
            f"{topic_id}, the checkpoint at offset {committed.checkpoint_offset} was committed in "
            f"{committed.topic_id}): "
            f"its messages up to the checkpoint are gone, and reading the new topic from that offset would skip "
            f"messages; the vchannel is not read. Restore the topic, or drop the collection's tables and "
            f"checkpoints to start it over")


def _segments_from_info(info: VchannelInfo, known: dict[int, SegmentMeta]) -> dict[int, SegmentMeta]:
    """The VchannelInfo's segments. Milvus 2.3/2.4's DataCoord fills only the id fields (7-9) and
    its DataNode fetches each segment's info; DeltaNode takes a segment named by id only from
    ``known`` (Delta's meta of the vchannel), and refuses one Delta does not know: without its
    positions the replay filter could not drop what the segment already holds."""
    segs: dict[int, SegmentMeta] = {}
    unknown: list[int] = []
    for state, infos, ids in ((SegmentState.GROWING, info.unflushedSegments, info.unflushedSegmentIds),
                              (SegmentState.FLUSHED, info.flushedSegments, info.flushedSegmentIds),
                              (SegmentState.DROPPED, info.dropped_segments, info.dropped_segmentIds)):
        for s in infos:
            segs[s.ID] = SegmentMeta(s.ID, s.partitionID, state, s.num_of_rows,
                                     dml_ts=s.dml_position.timestamp if s.HasField("dml_position") else 0,
                                     start_ts=s.start_position.timestamp if s.HasField("start_position") else 0)
        for seg_id in ids:
            if seg_id in segs:
                continue
            if seg_id in known:
                segs[seg_id] = known[seg_id]
            else:
                unknown.append(seg_id)
    if unknown:
        raise UnknownSegments(
            f"{info.channelName}: the VchannelInfo names segment(s) {sorted(unknown)} by id only (as Milvus "
            f"2.3/2.4's DataCoord does) and Delta has no meta for them: without their positions the replay "
            f"filter cannot tell which of their messages are persisted already; refusing to start the vchannel "
            f"(give their SegmentInfo in the VchannelInfo, or let DeltaNode's datacoord build it)")
    return segs


def initial_state(committed: ChannelState | None, info: VchannelInfo, node_id: int = 0,
                  positions: PositionCodec = CODECS["kafka"]) -> ChannelState:
    """Where a flowgraph starts, given the vchannel's committed state (None if it never committed);
    ``positions`` reads the broker's msgID bytes of the VchannelInfo.

    The replay filter covers the segments whose data may lie beyond the start position: all of
    the VchannelInfo's when starting from its seek position, only those Delta does not know when
    resuming at Delta's exact offset (nothing after it is persisted for the others, and their
    ``dml_ts``, the largest committed EndTs, is not tick-aligned like a Milvus dml position: a
    later message of a segment may carry a smaller ts, which the filter would drop). A filter
    the committed state still had active, and a seek whose TimeTick was not read yet, go on.
    """
    if committed is None:
        seek = info.seek_position
        state = ChannelState(vchannel=info.channelName, collection_id=info.collectionID,
                             pchannel=pchannel_of(info.channelName),
                             checkpoint_offset=positions.from_msg_id(seek.msgID) if seek.msgID else 0,
                             checkpoint_ts=seek.timestamp, seek_ts=seek.timestamp,
                             segments=_segments_from_info(info, {}))
        replayed = list(state.segments.values())
    else:
        state = committed.copy()
        replayed = [seg for seg_id, seg in _segments_from_info(info, committed.segments).items()
                    if seg_id not in state.segments]
        state.segments.update((seg.segment_id, seg) for seg in replayed)
    replay = ReplayFilter.of(state.replay)   # a committed filter still active goes on where it was
    replay.flushed.update((s.segment_id, s.dml_ts) for s in replayed if s.state == SegmentState.FLUSHED)
    replay.unflushed.update((s.segment_id, s.dml_ts) for s in replayed
                            if s.state in (SegmentState.GROWING, SegmentState.SEALED))
    state.replay = replay.state()
    state.node_id = node_id
    return state
