"""The cyclic garbage collector of a Python worker around a cycle's task (runs on executors).

Two costs, both measured in docs/platform.md ("CPython 3.11's cyclic garbage collector"):

- During a task, young collections kept walking the routers and writers a task holds to its
  end: the collector is off for the length of the task; reference counting frees a task's
  objects as it goes.
- After every task PySpark's worker daemon runs a full ``gc.collect()``, which walks every object
  of the worker (pyarrow's, PySpark's, DeltaNode's modules: about 92,000 objects, 34 ms a task,
  6% of a worker's samples at the 1,000-vchannel point). Everything alive when a task starts has
  survived the daemon's collection after the previous task, so it is frozen
  (``gc.freeze()``): the collection after the task walks only what the task left.

A frozen object that later becomes part of a reference cycle is not collected while frozen, so
every ``FULL_COLLECTION_EVERY``-th task unfreezes instead and the collection after it walks
everything again.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator
from contextlib import contextmanager

FULL_COLLECTION_EVERY = 64
_tasks = itertools.count(1)


@contextmanager
def collector_for_task() -> Iterator[None]:
    """Around one task: survivors of earlier tasks frozen, the collector off until it ends."""
    if next(_tasks) % FULL_COLLECTION_EVERY == 0:
        gc.unfreeze()
    else:
        gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
