"""The driver's reaction to a vchannel's failure (``failure.classify`` says what it is and what to do):
stop the vchannel, tell it, and load it again from Delta once its wait is over. Runs on the driver.

A vchannel that stops drops what it did not commit (unless the refused commit already deleted
exactly what it had not committed) and is loaded again from Delta after its wait
(``classify.restart_delay``: 2, 4, ... 60 s, or a short fixed interval for a cause outside the
process), alone: the cycle goes on for the others. A refused commit is refined here, where etcd
is: while etcd confirms this node owns the vchannel it restarts at once (the other writer is a
node cut off from etcd, refused at its next commit), and while etcd cannot be asked it waits
until it can (restarting would only take turns with the other writer). A full filesystem and an
object store that does not answer are each told once for the node (``space_watch``; ``store``,
an ``Outage``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from ..delta.layout import StorageLayout
from ..delta.object_store import is_object_store
from ..failure.classify import Failure, classify
from ..failure.kinds import FailureKind
from ..outages import Outage
from ..state.commit import discard
from ..vchannel.flowgraph import FlowgraphStatus, VchannelFlowgraph
from .cycle_report import CycleReport
from .space_watch import SpaceWatch

log = logging.getLogger(__name__)
STORE_SETTLED_AFTER = 5.0   # seconds of answers from the object store that end its outage


def store_outage(root: str) -> Outage:
    """The object store's outage tracker of a pipeline writing to ``root``. It ends once the store
    has answered (a commit or a reload from Delta) for ``STORE_SETTLED_AFTER`` seconds: a store coming
    back may answer one request and time out on the next, which is the same outage."""
    return Outage("object storage", root, log=log, settle_after=STORE_SETTLED_AFTER,
                  consequence="the vchannels that write there stop committing and retry every 5 s until it "
                              "answers; nothing is lost (what they did not commit is read again from the broker)")


class Fence(Protocol):
    """The ownership check before a commit (``etcd.fence.OwnershipFence``)."""

    @property
    def reachable(self) -> bool:
        """False while the source of ownership (etcd) cannot be asked."""

    def check(self, vchannels: list[str]) -> dict[str, str]:
        """The vchannels this node may no longer write, each with the reason."""


class VchannelStops:
    """Runs on the driver, in the pipeline's loop (``fail`` also from the sync step)."""

    def __init__(self, *, storage: StorageLayout, fence: Fence | None, load: Callable[[VchannelFlowgraph], None],
                 forget_topic: Callable[[str], None], space: SpaceWatch | None = None,
                 store: Outage | None = None) -> None:
        """``load``: a flowgraph's state from Delta again; ``forget_topic``: drop a pchannel's
        cached topic id (a failed vchannel's reload asks the broker); ``space``: where failures
        for a full filesystem are told; ``store``: where the object store's outages are."""
        self.storage, self.fence, self._load, self._forget_topic = storage, fence, load, forget_topic
        self.space = space if space is not None else SpaceWatch()
        self.store = store if store is not None else store_outage(storage.root)
        self._store = is_object_store(storage.root)

    def _waits_for_etcd(self, failure: Failure | None) -> bool:
        return (failure is not None and failure.kind is FailureKind.COMMIT_REFUSED and self.fence is not None
                and not self.fence.reachable)

    def fail(self, fg: VchannelFlowgraph, failure: Failure, now: float, report: CycleReport | None = None,
             at_once: bool = False, keep_files: bool = False) -> None:
        """Stop ``fg``: its uncommitted files are deleted unless ``keep_files``; it restarts after
        its backoff, or ``at_once``."""
        failure = classify(failure, where=self.storage.root, store=self._store)   # a task's says it in its text only
        files = fg.fail(failure, now)
        if not keep_files:
            discard(self.storage, fg.collection_id, files)
        self._forget_topic(fg.pchannel)
        if at_once:
            fg.retry_at = now
        then = ("not restarted until etcd can say which node owns it" if self._waits_for_etcd(failure)
                else f"restarting from Delta in {fg.retry_at - now:.0f} s")
        if failure.kind is FailureKind.STORE_UNREACHABLE:   # told once, for the node
            self.store.failed(failure.message)
            log.debug("%s: flowgraph failed, %s: %s", fg.vchannel, then, failure)
        elif not self.space.failed(fg, failure):   # a full filesystem is told once, for the node
            log.error("%s: flowgraph failed (%d in a row), %s: %s", fg.vchannel, fg.failures, then, failure)
        if report is not None:
            report.failed.append(fg.vchannel)

    def reload_due(self, members: dict[str, VchannelFlowgraph], now: float, report: CycleReport) -> None:
        """Load again from Delta the failed flowgraphs whose backoff is over."""
        for fg in members.values():
            if fg.status != FlowgraphStatus.FAILED or now < fg.retry_at or self._waits_for_etcd(fg.last_failure):
                continue
            refused = fg.last_failure is not None and fg.last_failure.kind is FailureKind.COMMIT_REFUSED
            try:
                self._load(fg)
                fg.claim = refused   # etcd said it is ours (above): commit at its next cycle
                log.log(logging.DEBUG if fg.last_failure is not None and fg.last_failure.outside else logging.INFO,
                        "%s: flowgraph restarted from Delta at offset %d", fg.vchannel, fg.next_offset)
            except Exception as e:  # noqa: BLE001 - retried after the next backoff
                self.fail(fg, classify(e, kind=FailureKind.RESTART_FAILED, where=self.storage.root,
                                       step="loading it from Delta", store=self._store), now, report)
