"""The failure model's policy (``deltanode.failure``): one action per kind, the classifier's order
(a full filesystem, an object store away, the error's own kind, the caller's), the wait before a
stopped vchannel is loaded again, and every exception of DeltaNode's own under one root. Pure
logic and real exceptions."""

from __future__ import annotations

import ast
import errno
import pickle
from pathlib import Path

import pytest
from botocore.exceptions import EndpointConnectionError

import deltanode
from deltanode.config.jars import MissingJars
from deltanode.config.values import ConfError
from deltanode.executor.decode import Reject
from deltanode.failure.classify import BACK_OFF_EVERY, MAX_BACKOFF, Failure, classify, restart_delay
from deltanode.failure.errors import BadInput, DeltaNodeError
from deltanode.failure.kinds import ACTIONS, Action, FailureKind

# The whole policy, written out once more: a kind added or moved to another action fails here.
EXPECTED = {
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
URL = "http://minio:9000/deltanode/t/_delta_log/00000000000000000007.json"


def test_every_kind_has_exactly_one_action_and_every_action_a_kind():
    assert ACTIONS == EXPECTED
    assert set(ACTIONS) == set(FailureKind)
    assert set(ACTIONS.values()) == set(Action)


@pytest.mark.parametrize("kind", list(FailureKind))
def test_a_failure_acts_as_its_kind_says_and_crosses_from_a_task_whole(kind):
    failure = Failure(kind=kind, message="why")
    assert failure.action is EXPECTED[kind]
    assert failure.outside is (EXPECTED[kind] is Action.BACK_OFF)
    assert str(failure) == f"{kind.value}: why"
    assert pickle.loads(pickle.dumps(failure)) == failure   # a task's result carries it to the driver


@pytest.mark.parametrize("error, kind, store, expected", [
    # a full filesystem wins whatever the caller was doing and whatever the error is
    (OSError(errno.ENOSPC, "No space left on device"), FailureKind.COMMIT_FAILED, False, FailureKind.STORAGE_FULL),
    (Reject("No space left on device"), FailureKind.ROUTER, False, FailureKind.STORAGE_FULL),
    # an object store that does not answer, only where the place written to is one
    (EndpointConnectionError(endpoint_url=URL), FailureKind.COMMIT_FAILED, True, FailureKind.STORE_UNREACHABLE),
    (EndpointConnectionError(endpoint_url=URL), FailureKind.COMMIT_FAILED, False, FailureKind.COMMIT_FAILED),
    # the kind an error always stands for, over the caller's
    (Reject("unknown message type 7"), FailureKind.ROUTER, False, FailureKind.REJECTED),
    (ConfError("pipeline.splits: not a number"), FailureKind.CYCLE_FAILED, False, FailureKind.BAD_CONF),
    (MissingJars("no delta jars"), FailureKind.CYCLE_FAILED, False, FailureKind.BAD_CONF),
    # else the caller's
    (ValueError("bad row"), FailureKind.ROUTER, True, FailureKind.ROUTER),
    (DeltaNodeError("anything"), FailureKind.RESTART_FAILED, False, FailureKind.RESTART_FAILED),
])
def test_the_classifier_decides_in_order(error, kind, store, expected):
    failure = classify(error, kind=kind, where="s3://deltanode/t" if store else "/data/delta", step="committing",
                       store=store)
    assert failure.kind is expected and failure.action is EXPECTED[expected]


def test_outside_causes_are_worded_with_place_reason_and_step_and_others_with_the_error_or_the_callers_words():
    full = classify(OSError(errno.EDQUOT, "quota"), kind=FailureKind.COMMIT_FAILED, where="/d", step="committing")
    assert full == Failure(kind=FailureKind.STORAGE_FULL, message="/d: Disk quota exceeded (committing)")
    assert classify(ValueError("x"), kind=FailureKind.ROUTER).message == "ValueError: x"
    assert classify(RuntimeError("job lost"), kind=FailureKind.TASK, message="stage 3 failed").message == \
        "stage 3 failed"
    with pytest.raises(TypeError, match="no kind"):
        classify(ValueError("x"))


def test_a_tasks_failure_is_kept_unless_its_text_says_the_object_store_did_not_answer():
    router = Failure(kind=FailureKind.ROUTER, message="OSError: AWS Error NETWORK_CONNECTION during PutObject")
    assert classify(router, where="/data/delta", store=False) is router
    away = classify(router, where="s3://deltanode/t", store=True)
    assert away == Failure(kind=FailureKind.STORE_UNREACHABLE, message=(
        "s3://deltanode/t: OSError: AWS Error NETWORK_CONNECTION during PutObject (RouterError)"))
    full = Failure(kind=FailureKind.STORAGE_FULL, message="/d: No space left on device (x)")
    assert classify(full, where="s3://deltanode/t", store=True) is full
    plain = Failure(kind=FailureKind.BROKER, message="partition gone")
    assert classify(plain, where="s3://deltanode/t", store=True) is plain


def test_the_wait_is_short_and_fixed_outside_the_process_and_doubles_up_to_a_minute_otherwise():
    outside = Failure(kind=FailureKind.STORE_UNREACHABLE, message="x")
    inside = Failure(kind=FailureKind.COMMIT_FAILED, message="x")
    assert [restart_delay(outside, n) for n in (1, 5, 20)] == [BACK_OFF_EVERY] * 3
    assert [restart_delay(inside, n) for n in (1, 2, 3, 5, 6, 20)] == [2.0, 4.0, 8.0, 32.0, MAX_BACKOFF, MAX_BACKOFF]


def test_bad_input_is_a_value_error_and_under_the_root():
    assert issubclass(BadInput, DeltaNodeError) and issubclass(BadInput, ValueError)
    assert DeltaNodeError.kind is None


def _exception_classes() -> list[tuple[str, str, list[str]]]:
    """(module file, class, base names) of each class in app/ whose bases name an exception."""
    package = Path(deltanode.__file__).parent
    found = []
    for f in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception")) or b in ("DeltaNodeError", "BadInput") for b in bases):
                    found.append((str(f.relative_to(package)), node.name, bases))
    return found


def test_every_exception_class_of_deltanode_is_under_the_root():
    """Each exception class's first base is the root, ``BadInput``, or another class of DeltaNode's
    own (imported and checked here): a new class on a builtin base fails this."""
    import importlib
    classes = _exception_classes()
    assert len(classes) > 30
    off = []
    for path, name, _ in classes:
        module = importlib.import_module("deltanode." + path.removesuffix(".py").replace("/", ".")
                                         .removesuffix(".__init__"))
        cls = getattr(module, name)
        if isinstance(cls, type) and issubclass(cls, BaseException) and not issubclass(cls, DeltaNodeError):
            off.append(f"{path}: {name}")
    assert not off, "exception classes not under failure.errors.DeltaNodeError:\n" + "\n".join(off)
