"""What a DeltaNode Spark job is: a kind (its executor function, job group and scheduler pool), a
spec in and a result out, both picklable records.

Which side runs what:
- the driver plans the specs and, after the job, commits its results or aborts (``launch``);
- an executor runs ``run_pickled``: the spec unpickled, the kind's ``run`` on it, the result
  pickled. ``run`` is a module-level function of the executor side (``deltanode.executor``,
  ``deltanode.milvus_import``'s tasks): Spark pickles it by reference.

Specs and results are pickled here with ``pickle``, not by Spark: Spark's pickler runs a Python
hook for every object, and a cycle's thousands of routing contexts pickle about twice as fast
with ``pickle`` (docs/platform.md measures this); the records are plain classes it handles. The
results are then unpickled by the thread that launched the job (the cycle's job thread, not the
pipeline's loop). This module imports no Spark: executors load it.
"""

from __future__ import annotations

import enum
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

S = TypeVar("S")
R = TypeVar("R")


class JobGroup(enum.StrEnum):
    """Spark job groups: the jobs of a group are cancelled together (``launch.cancel``)."""

    PIPELINE = "deltanode-pipeline"            # the cycle's and delete marking's: the pipeline's stop cancels them
    COMPACTION = "deltanode-compaction"        # the compactor's rewrites: its stop cancels them
    MILVUS_IMPORT = "deltanode-milvus-import"  # a vchannel's import from Milvus's storage
    WARM_UP = "deltanode-warm-up"              # the throw-away job at the start and of an idle driver


@dataclass(frozen=True, kw_only=True)
class JobKind(Generic[S, R]):
    """One kind of Spark job. Made on the driver, once per kind; ``run`` runs on executors.

    ``pool``: the scheduler pool its jobs run in (Spark schedules them FAIR: config.jvm_options).
    Work beside the pipeline (compaction, imports) has a pool of its own, so the pipeline's
    cycles keep their share of the cores; ``default`` is Spark's own, the pipeline's."""

    name: str                   # what its jobs' descriptions start with
    run: Callable[[S], R]       # the executor side: a spec -> its result
    group: JobGroup
    pool: str = "default"


@dataclass(frozen=True, kw_only=True)
class Outcome(Generic[S, R]):
    """What a job whose tasks are isolated (``launch.launch_isolated``) gave the driver: the
    results of the specs that ran, to commit, and the specs whose task failed with why, to abort.
    Runs on the driver."""

    results: list[R]
    failed: list[tuple[S, Exception]]


def run_pickled(run: Callable[[S], R], spec: bytes) -> bytes:
    """Runs on an executor: ``run`` on a spec pickled with ``pickle``, its result pickled the same way."""
    return pickle.dumps(run(pickle.loads(spec)), protocol=pickle.HIGHEST_PROTOCOL)
