"""A vchannel's failure in a task as the driver gets it (``records.TaskError``): the kind is decided
here, where the exception is, so that a full filesystem is told apart from the rest by its errno,
never guessed from a message on the driver. Runs on executors."""

from __future__ import annotations

from ..delta import space
from ..records import TaskError, TaskErrorKind


def task_error(kind: TaskErrorKind, error: BaseException, *, where: str, step: str) -> TaskError:
    """``kind``'s error for ``error``, or ``STORAGE_FULL`` when ``error`` is ``where`` (the place
    the task writes to) out of space while ``step``."""
    reason = space.out_of_space(error)
    if reason is not None:
        return TaskError(kind=TaskErrorKind.STORAGE_FULL, message=space.describe(where, reason, step))
    return TaskError(kind=kind, message=f"{type(error).__name__}: {error}")
