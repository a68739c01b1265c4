"""Loading a vchannel's flowgraph from Delta (driver): at its watch, on a channel watcher's
thread, and again after a failure, in the pipeline's loop.

Its committed state and its ``txn`` in each table come from its collection's committer, and
the broker's id of its pchannel topic is checked against the one it committed under
(``flowgraph.recovery.check_topic``). A start loads every vchannel of a pchannel in a burst, so
topic ids are asked at most every ``TOPIC_ID_TTL`` seconds, unless a vchannel of the pchannel
failed or left since (``forget``), or the broker left its pchannel's watermark unanswered since
(the topic may have been deleted and created again meanwhile). While the broker does not answer
for the pchannel itself (its last watermark request went unanswered: ``answered_since``), the id
is not asked (the question would wait out its timeout, holding up the thread that loads), as when
the broker cannot answer; a pchannel it answers for is checked, whatever the others' state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..milvus_import.importer import VchannelImporter
from ..mq.broker import BrokerError, HighWatermarks
from ..state import meta
from ..state.commit import CollectionCommitter
from ..vchannel.flowgraph import VchannelFlowgraph
from ..wire.datapb import VchannelInfo
from .sync_manager import SyncManager

log = logging.getLogger(__name__)
TOPIC_ID_TTL = 10.0   # seconds a pchannel's topic id is reused for loads


class VchannelLoader:
    """Runs on the driver: in the pipeline's loop, and on channel watchers' threads (``load``)."""

    def __init__(self, *, syncs: SyncManager, importer: VchannelImporter | None = None) -> None:
        self._syncs = syncs
        self._importer = importer   # mirror mode: imports what Milvus persisted of a vchannel first
        self._topic_ids: dict[str, tuple[str, float]] = {}   # pchannel -> (its topic id, monotonic time asked)
        self.watermarks: HighWatermarks | None = None         # the broker's metadata client, once started

    def committer(self, fg: VchannelFlowgraph) -> CollectionCommitter:
        return self._syncs.committer(fg.collection_id, fg.layout.insert_schema(), fg.layout.delete_schema())

    def load(self, fg: VchannelFlowgraph, progressed: Callable[[], None] = lambda: None) -> None:
        """``fg`` from Delta's state of its vchannel (else its VchannelInfo's).

        A collection without an insert_log table yet gets it now, empty, so that its first
        commit does not create it: at 10,000 vchannels, 5,000 tables were created in the first
        seconds of traffic, by the syncs of the cycles that carried each collection's first
        rows (``DeltaLog._create``: 7.6% of the loaded driver's GIL samples).

        A vchannel that never committed, handed over with segments (a mirror whose Milvus
        persisted rows the broker no longer holds: ``datacoord.milvus_catalog``), has those
        segments imported first (``milvus_import.importer``; ``progressed`` is called at each of
        its commits); it then starts from the state the import committed.

        A table that records a newer Milvus schema than the one its watch gave (a field added to the
        live collection: ``storage.table_schema``; DeltaNode's own catalog never hears of it) gives
        the flowgraph that one.
        """
        committer = self.committer(fg)
        with committer.lock:
            committed = meta.channel_state_in(committer.created_insert_log(), fg.vchannel)
            watermarks = committer.watermarks(fg.vchannel)
            recorded = committer.recorded_schema()
        if committed is None and self._importer is not None and carries_segments(fg.info):
            self._importer.run(fg.vchannel, fg.collection_id, fg.schema, committer, fg.node_id, progressed)
            fg.info = VchannelInfo(collectionID=fg.info.collectionID, channelName=fg.info.channelName,
                                   seek_position=fg.info.seek_position)   # the import's state supersedes it
            with committer.lock:
                committed = meta.channel_state_in(committer.created_insert_log(), fg.vchannel)
                watermarks = committer.watermarks(fg.vchannel)
        fg.load(committed, watermarks, time.monotonic(), self._topic_id(fg.pchannel))
        given = fg.schema.version
        if recorded is not None and fg.take_schema(recorded):
            log.info("%s: writes with schema version %d, which its table records (its watch gave version %d)",
                     fg.vchannel, recorded.version, given)

    def forget(self, pchannel: str) -> None:
        """The next load of a vchannel of ``pchannel`` asks the broker, not the cache."""
        self._topic_ids.pop(pchannel, None)

    def _topic_id(self, pchannel: str) -> str:
        """The broker's id of the pchannel topic ("" when it gives none or cannot answer now: the
        check is skipped, the reads will tell)."""
        if self.watermarks is None:
            return ""
        answered_since = self.watermarks.answered_since(pchannel)
        if answered_since is None:
            log.info("%s: the broker does not answer for it; loading without checking the topic's id", pchannel)
            return ""
        known = self._topic_ids.get(pchannel)
        if known is not None and known[1] >= answered_since and time.monotonic() - known[1] < TOPIC_ID_TTL:
            return known[0]
        try:
            topic_id = self.watermarks.topic_id(pchannel)
        except BrokerError as e:
            log.warning("%s: cannot check the topic's id (%s); loading without the check", pchannel, e)
            return ""
        self._topic_ids[pchannel] = (topic_id, time.monotonic())
        return topic_id


def carries_segments(info: VchannelInfo) -> bool:
    """Whether a VchannelInfo names segments (a vchannel that never committed then has persisted rows)."""
    return bool(info.flushedSegmentIds or info.unflushedSegmentIds or info.flushedSegments or info.unflushedSegments)
