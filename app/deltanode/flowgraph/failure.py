"""Why a vchannel's flowgraph stopped: a kind and its message (its ``last_error`` is the two)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FailureKind(enum.StrEnum):
    """What stopped a flowgraph; the text starts its ``last_error``."""

    BROKER = "BrokerError"               # a range of its pchannel could not be read (or was lost)
    TASK = "SparkTaskFailed"             # the Spark task that read its range died
    ROUTER = "RouterError"               # its router raised in a task
    BATCH_RANGE = "BatchRangeError"      # its portions do not continue its position
    OWNERSHIP_LOST = "OwnershipLost"     # etcd says another node owns it (the fence)
    COMMIT_REFUSED = "CommitRefused"     # Delta refused its commit: another writer moved its txn
    COMMIT_FAILED = "CommitFailed"       # its collection's commit raised
    MARK_FAILED = "MarkFailed"           # marking its deletes failed
    RESTART_FAILED = "RestartFailed"     # loading it again from Delta failed
    CYCLE_FAILED = "CycleFailed"         # the whole cycle raised (a bug): every vchannel restarts


@dataclass(frozen=True, kw_only=True)
class Failure:
    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"
