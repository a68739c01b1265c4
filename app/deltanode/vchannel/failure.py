"""Why a vchannel's flowgraph stopped: a kind and its message (its ``last_error`` is the two)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..delta import space, store_outage
from ..delta.object_store import is_object_store

# A vchannel stopped by something outside the process (a full filesystem, an object store that
# does not answer) is loaded again this often while it lasts, not after the growing backoff of
# other failures: when the space or the store comes back, every vchannel should resume within
# seconds, not up to a minute apart.
RETRY_WHILE_FULL = 5.0


class FailureKind(enum.StrEnum):
    """What stopped a flowgraph; the text starts its ``last_error``."""

    BROKER = "BrokerError"               # a range of its pchannel could not be read (or was lost)
    # The broker did not answer for its range. The cycle never fails a vchannel of this kind: it waits
    # where it stands (``pipeline.cycle_apply``); the kind names the task's error (``task_failure``).
    BROKER_UNREACHABLE = "BrokerUnreachable"
    TASK = "SparkTaskFailed"             # the Spark task that read its range died
    ROUTER = "RouterError"               # its router raised in a task
    BATCH_RANGE = "BatchRangeError"      # its portions do not continue its position
    OWNERSHIP_LOST = "OwnershipLost"     # etcd says another node owns it (the fence)
    COMMIT_REFUSED = "CommitRefused"     # Delta refused its commit: another writer moved its txn
    COMMIT_FAILED = "CommitFailed"       # its collection's commit raised
    MARK_FAILED = "MarkFailed"           # marking its deletes failed
    RESTART_FAILED = "RestartFailed"     # loading it again from Delta failed
    CYCLE_FAILED = "CycleFailed"         # the whole cycle raised (a bug): every vchannel restarts
    STORAGE_FULL = "StorageFull"         # a write found its filesystem out of space, whatever the step
    STORE_UNREACHABLE = "StoreUnreachable"   # the object store did not answer, whatever the step


@dataclass(frozen=True, kw_only=True)
class Failure:
    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    @property
    def storage_full(self) -> bool:
        return self.kind is FailureKind.STORAGE_FULL

    @property
    def outside(self) -> bool:
        """Caused by something outside the process that ends by itself or by an operator's hand
        (a full filesystem, the object store away): retried on a short fixed interval, told once
        for the node, and no reason to restart the node (``/healthz`` stays up)."""
        return self.kind in (FailureKind.STORAGE_FULL, FailureKind.STORE_UNREACHABLE)


def storage_full(*, where: str, reason: str, step: str) -> Failure:
    """The failure of a vchannel whose write to ``where`` found no space (``space.describe``)."""
    return Failure(kind=FailureKind.STORAGE_FULL, message=space.describe(where, reason, step))


def store_unreachable(*, where: str, reason: str, step: str) -> Failure:
    """The failure of a vchannel whose object store at ``where`` did not answer."""
    return Failure(kind=FailureKind.STORE_UNREACHABLE, message=space.describe(where, reason, step))


def failure_of(kind: FailureKind, error: BaseException, *, where: str, step: str) -> Failure:
    """The failure of ``kind`` that ``error`` caused, or ``STORAGE_FULL`` when ``error`` is a
    filesystem out of space, or ``STORE_UNREACHABLE`` when ``where`` is an object store that did
    not answer (``where``: the place written to; ``step``: what was being done)."""
    reason = space.out_of_space(error)
    if reason is not None:
        return storage_full(where=where, reason=reason, step=step)
    if is_object_store(where) and (reason := store_outage.unreachable(error)) is not None:
        return store_unreachable(where=where, reason=reason, step=step)
    return Failure(kind=kind, message=f"{type(error).__name__}: {error}")


def outside_cause(failure: Failure, where: str) -> Failure:
    """``failure`` as ``STORE_UNREACHABLE`` when its text says the object store at ``where`` did
    not answer (a task's error, which only has its text), else ``failure`` itself."""
    if failure.outside or not is_object_store(where):
        return failure
    reason = store_outage.unreachable(failure.message)
    return failure if reason is None else store_unreachable(where=where, reason=reason, step=str(failure.kind))
