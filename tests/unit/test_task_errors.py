"""A vchannel a task fails fails on the driver with the kind the executor gave its error, by name."""

from __future__ import annotations

from deltanode.pipeline.failures import task_failure
from deltanode.records import TaskError, TaskErrorKind
from deltanode.vchannel.failure import Failure, FailureKind


def test_every_task_error_kind_is_a_failure_kind_of_the_same_name():
    for kind in TaskErrorKind:
        assert task_failure(TaskError(kind=kind, message="why")) == Failure(kind=FailureKind[kind.name], message="why")


def test_a_broker_error_fails_as_a_broker_failure_and_a_router_error_as_a_router_failure():
    assert task_failure(TaskError(kind=TaskErrorKind.BROKER, message="gone")).kind is FailureKind.BROKER
    assert task_failure(TaskError(kind=TaskErrorKind.ROUTER, message="bad row")).kind is FailureKind.ROUTER
    assert task_failure(TaskError(kind=TaskErrorKind.MARK_FAILED, message="x")).kind is FailureKind.MARK_FAILED
