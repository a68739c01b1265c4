"""The node's storage-full condition (driver): told once, however many vchannels it stops.

A filesystem out of space (the storage root, or Spark's local directory) fails every vchannel
that writes there, again at each of its retries (``failure.classify.BACK_OFF_EVERY``): at a
thousand vchannels a line per failure would bury the log. Each such failure comes here
(``vchannel_stops.VchannelStops.fail``): a place found full for the first time logs one ERROR line, the
vchannels' own failures go to DEBUG. The condition holds until every vchannel it stopped has
committed again (its checkpoint moved past where it stood when it failed), or has run again for a
whole retry interval without failing while the filesystem it found full has room again (a
vchannel with nothing to write cannot prove the space back by a commit; the filesystem's own
count can), or left the node; then one line says so. Nothing is
lost meanwhile: what a failed vchannel did not commit is read again from the broker after its
reload.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..delta import space
from ..failure.classify import BACK_OFF_EVERY, Failure
from ..vchannel.flowgraph import FlowgraphStatus, VchannelFlowgraph

log = logging.getLogger(__name__)


def _offset(fg: VchannelFlowgraph) -> int:
    """Where ``fg``'s committed checkpoint stands (-1: it has none)."""
    return fg.committed.checkpoint_offset if fg.committed is not None else -1


class SpaceWatch:
    """Runs on the driver, in the pipeline's loop; ``condition`` and ``since`` are read from any
    thread (each is replaced whole, never changed in place)."""

    def __init__(self) -> None:
        self.condition: str | None = None   # "storage full: {where}: {reason}" (several joined by "; ")
        self.since: float | None = None      # wall clock of the first failure of the condition
        self._places: dict[str, None] = {}   # the condition's lines, in the order they were found
        self._waiting: dict[str, int] = {}   # vchannel -> its checkpoint offset when it failed
        self._running: dict[str, float] = {}   # vchannel -> monotonic time it was first seen running again
        self._where: dict[str, str | None] = {}   # vchannel -> the local path it found full (None: not known)

    def failed(self, fg: VchannelFlowgraph, failure: Failure) -> bool:
        """Note ``fg``'s failure; True when it is a full filesystem (told here: once per place)."""
        if not failure.storage_full:
            return False
        self._waiting.setdefault(fg.vchannel, _offset(fg))
        self._running.pop(fg.vchannel, None)
        self._where[fg.vchannel] = space.path_of(failure.message)
        line = space.condition(failure.message)
        if line not in self._places:
            self._places[line] = None
            if self.since is None:
                self.since = time.time()
            self.condition = "; ".join(self._places)
            log.error("%s: the vchannels that write there stop committing and retry every %.0f s until space "
                      "returns; nothing is lost (what they did not commit is read again from the broker)",
                      line, BACK_OFF_EVERY)
        log.debug("%s: flowgraph failed, retried in %.0f s: %s", fg.vchannel, BACK_OFF_EVERY, failure)
        return True

    def check(self, member: Callable[[str], VchannelFlowgraph | None]) -> None:
        """After a turn (``member``: a vchannel's flowgraph, None once it left): the vchannels that
        committed since they failed wait no more; when none waits, the condition is over."""
        if not self._waiting:
            return
        now = time.monotonic()
        for vchannel, offset in list(self._waiting.items()):
            fg = member(vchannel)
            if fg is not None and fg.status == FlowgraphStatus.RUNNING:
                self._running.setdefault(vchannel, now)
            idle_long = now - self._running.get(vchannel, now) >= BACK_OFF_EVERY and \
                space.has_room(self._where.get(vchannel))
            if fg is None or _offset(fg) > offset or idle_long:
                del self._waiting[vchannel]
                self._running.pop(vchannel, None)
                self._where.pop(vchannel, None)
        if self._waiting or self.condition is None:
            return
        lasted = time.time() - self.since if self.since is not None else 0.0
        log.warning("storage has space again (%s, for %.0f s): every vchannel it stopped commits again",
                    self.condition, lasted)
        self.condition, self.since, self._places = None, None, {}

    @property
    def waiting(self) -> int:
        """The vchannels a full filesystem stopped that have not committed since."""
        return len(self._waiting)
