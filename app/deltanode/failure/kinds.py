"""What failed, and what the driver does about it: the kinds and the actions (pure logic, runs
anywhere; standard library only, a task's result carries a kind across to the driver)."""

from __future__ import annotations

import enum


class Action(enum.StrEnum):
    """What the driver does about a failure. Pure data; runs anywhere."""

    # Nothing is given up: the same work is done again at the next cycle (the vchannel waits
    # where it stands).
    RETRY = "retry"
    # A cause outside the process (a full filesystem, an object store away): the vchannel stops
    # and is loaded again on a short fixed interval while the cause lasts, told once for the node.
    BACK_OFF = "back off"
    # The message or row is set aside in the collection's quarantine table; the vchannel goes on.
    QUARANTINE = "quarantine"
    # The vchannel drops what it did not commit and is loaded again from Delta after a growing
    # backoff, alone: the others go on.
    STOP_VCHANNEL = "stop the vchannel"
    # The process exits with one line; whatever it did not commit is read again at its next start.
    STOP_NODE = "stop the node"


class FailureKind(enum.StrEnum):
    """What failed; the text starts a failed vchannel's ``last_error``. Pure data; runs anywhere (a
    task's result carries it to the driver)."""

    BROKER = "BrokerError"               # a range of its pchannel could not be read (or was lost)
    BROKER_UNREACHABLE = "BrokerUnreachable"   # the broker did not answer for its range
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
    REJECTED = "Rejected"                # a message that does not fit its collection (``executor.decode``)
    SPARK_STOPPED = "SparkStopped"       # Spark stopped under the pipeline: spark-submit's JVM is exiting
    BAD_CONF = "BadConf"                 # the conf, or the jars it names, cannot run the node


# One action per kind: the whole policy. The driver's refinements (a refused commit restarts at
# once while etcd confirms this node owns the vchannel, and waits while etcd cannot be asked) are
# in ``pipeline.vchannel_stops``.
ACTIONS: dict[FailureKind, Action] = {
    FailureKind.BROKER: Action.STOP_VCHANNEL,
    FailureKind.BROKER_UNREACHABLE: Action.RETRY,
    FailureKind.TASK: Action.STOP_VCHANNEL,
    FailureKind.ROUTER: Action.STOP_VCHANNEL,
    FailureKind.BATCH_RANGE: Action.STOP_VCHANNEL,
    FailureKind.OWNERSHIP_LOST: Action.STOP_VCHANNEL,
    FailureKind.COMMIT_REFUSED: Action.STOP_VCHANNEL,
    FailureKind.COMMIT_FAILED: Action.STOP_VCHANNEL,
    FailureKind.MARK_FAILED: Action.STOP_VCHANNEL,
    FailureKind.RESTART_FAILED: Action.STOP_VCHANNEL,
    FailureKind.CYCLE_FAILED: Action.STOP_VCHANNEL,
    FailureKind.STORAGE_FULL: Action.BACK_OFF,
    FailureKind.STORE_UNREACHABLE: Action.BACK_OFF,
    FailureKind.REJECTED: Action.QUARANTINE,
    FailureKind.SPARK_STOPPED: Action.STOP_NODE,
    FailureKind.BAD_CONF: Action.STOP_NODE,
}
