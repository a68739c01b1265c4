"""Whether the broker answered a DataNode's pipeline lately, and since when it has not.

A broker that does not answer (down, starting again, paused, cut off: ``BrokerUnreachable``) fails
no vchannel: each waits where it stands and reads on once the broker answers (``pipeline.cycle``).
The outage is told once (``outages``). It ends once the broker has answered for ``SETTLED_AFTER``
seconds: Apache Kafka continued after a pause may answer a cycle, then refuse the next one's stale
leader epochs, which is the same outage.
"""

from __future__ import annotations

import logging

from ..outages import Outage, describe

log = logging.getLogger(__name__)
SETTLED_AFTER = 5.0   # seconds of answers, without an unanswered request, that end an outage


class BrokerReachability(Outage):
    """Runs on the driver: the pipeline's loop reports (``failed``, ``answered``: every request of
    a cycle answered), the progress reports, status document and metrics read."""

    def __init__(self, address: str) -> None:
        super().__init__("broker", address, log=log, settle_after=SETTLED_AFTER,
                         consequence="the DataNode's vchannels wait where they stand, none fails, "
                                     "and read on when it answers")


def describe_broker_outage(since: float, error: str, now: float | None = None) -> str:
    """``broker unreachable since HH:MM:SS (N s): error`` for an outage that started at ``since`` (wall clock)."""
    return describe("broker", since, error, now)
