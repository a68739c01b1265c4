"""The Python worker's collector around a task: what survived earlier tasks is frozen, and the
collections after tasks still walk everything now and then."""

import gc

import pytest

from deltanode.executor.worker_gc import FULL_COLLECTION_EVERY, collector_for_task


def test_a_task_runs_without_the_collector_and_freezes_what_was_alive_before_it() -> None:
    try:
        frozen_during = []
        for _ in range(FULL_COLLECTION_EVERY):
            with collector_for_task():
                assert not gc.isenabled()
                frozen_during.append(gc.get_freeze_count())
            assert gc.isenabled()
        # Exactly one task in FULL_COLLECTION_EVERY unfreezes, so the daemon's collection after
        # it is a full one; every other task starts with the survivors frozen.
        assert frozen_during.count(0) == 1
        assert all(count > 1000 for count in frozen_during if count)
    finally:
        gc.unfreeze()


def test_the_collector_is_back_on_when_a_task_raises() -> None:
    try:
        with pytest.raises(ValueError), collector_for_task():
            raise ValueError("the task failed")
    finally:
        gc.unfreeze()
    assert gc.isenabled()
