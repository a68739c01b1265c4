"""The one classifier: from an exception, or a failure a task returned, to a ``Failure`` (a kind
and its message) whose ``action`` says what the driver does, and when a stopped vchannel is
tried again. Pure logic, standard library only; runs on the driver, and on executors where a
task words its error.

What decides, in order: a filesystem out of space (``STORAGE_FULL``, whatever the step), an
object store that did not answer (``STORE_UNREACHABLE``, when the place written to is one), the
kind the error always stands for (``DeltaNodeError.kind``), then the kind of what the caller was
doing. A task's failure crosses to the driver with its text only: the driver looks at that text
for an object store that did not answer, which the executor does not judge.
"""

from __future__ import annotations

from dataclasses import dataclass

from .causes import out_of_space, store_unanswered
from .errors import DeltaNodeError
from .kinds import ACTIONS, Action, FailureKind

# A vchannel stopped by something outside the process (a full filesystem, an object store that
# does not answer) is loaded again this often while it lasts, not after the growing backoff of
# other failures: when the space or the store comes back, every vchannel should resume within
# seconds, not up to a minute apart.
BACK_OFF_EVERY = 5.0
MAX_BACKOFF = 60.0   # the longest wait before a stopped vchannel is loaded again


@dataclass(frozen=True, kw_only=True)
class Failure:
    """Why a vchannel stopped, or why a task failed it (a task's result carries it to the driver):
    a kind and its message. Runs on the driver and on executors."""

    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    @property
    def action(self) -> Action:
        return ACTIONS[self.kind]

    @property
    def storage_full(self) -> bool:
        return self.kind is FailureKind.STORAGE_FULL

    @property
    def outside(self) -> bool:
        """Caused by something outside the process that ends by itself or by an operator's hand
        (a full filesystem, the object store away): retried on a short fixed interval, told once
        for the node, and no reason to restart the node (``/healthz`` stays up)."""
        return self.action is Action.BACK_OFF


def worded(where: str, reason: str, step: str) -> str:
    """A failure's message for a cause outside the process: ``{where}: {reason} ({step})``, the
    place, the system's words for why, and what DeltaNode was doing."""
    return f"{where}: {reason} ({step})"


def classify(error: BaseException | Failure, *, kind: FailureKind | None = None, where: str = "", step: str = "",
             store: bool = False, message: str | None = None) -> Failure:
    """The failure ``error`` stands for. ``kind``: what the caller was doing, for an error that
    does not say more; ``where``: the place written to; ``step``: what was being done there;
    ``store``: whether ``where`` is an object store; ``message``: the words for a failure of
    ``kind`` (default: the error's type and text). A ``Failure`` (a task's) is kept, unless its
    text says the object store at ``where`` did not answer."""
    if isinstance(error, Failure):
        if error.outside or not store:
            return error
        reason = store_unanswered(error.message)
        return error if reason is None else Failure(
            kind=FailureKind.STORE_UNREACHABLE, message=worded(where, reason, str(error.kind)))
    reason = out_of_space(error)
    if reason is not None:
        return Failure(kind=FailureKind.STORAGE_FULL, message=worded(where, reason, step))
    if store and (reason := store_unanswered(error)) is not None:
        return Failure(kind=FailureKind.STORE_UNREACHABLE, message=worded(where, reason, step))
    own = error.kind if isinstance(error, DeltaNodeError) else None
    if own is not None and own is not kind:
        return Failure(kind=own, message=f"{type(error).__name__}: {error}")
    if kind is None:
        raise TypeError(f"no kind for {type(error).__name__}: the caller says what it was doing")
    return Failure(kind=kind, message=message if message is not None else f"{type(error).__name__}: {error}")


def restart_delay(failure: Failure, failures: int) -> float:
    """Seconds before a vchannel stopped by ``failure``, its ``failures``-th in a row, is loaded
    again: a short fixed interval for a cause outside the process, else a backoff doubling from
    2 s up to ``MAX_BACKOFF``."""
    if failure.action is Action.BACK_OFF:
        return BACK_OFF_EVERY
    return min(MAX_BACKOFF, 2.0 ** failures)
