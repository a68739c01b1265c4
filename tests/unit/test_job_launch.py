"""The one launcher of DeltaNode's Spark jobs (``jobs.launch``), on a fake Spark job runner
(``FakeSparkContext``: the executor side runs here, on pickled specs as on an executor)."""

import pickle

import pytest

from deltanode.jobs.contract import JobGroup, JobKind, run_pickled
from deltanode.jobs.launch import SparkStopped, cancel, launch, launch_isolated

from .fakes import FakeSparkContext


def _square(n: int) -> int:
    if n == 3:
        raise ValueError("three breaks its task")
    return n * n


SQUARES = JobKind(name="squares", run=_square, group=JobGroup.COMPACTION, pool="squares-pool")
PIPELINE_SQUARES = JobKind(name="squares", run=_square, group=JobGroup.PIPELINE)


def test_a_job_runs_in_its_kind_s_group_and_pool_on_pickled_specs_and_gives_results_in_order():
    sc = FakeSparkContext()
    assert launch(sc, SQUARES, [1, 2, 4], description="three", slices=2) == [1, 4, 16]
    [job] = sc.jobs
    assert (job.group, job.description, job.pool, job.slices) == (JobGroup.COMPACTION, "squares: three",
                                                                  "squares-pool", 2)
    assert all(isinstance(item, bytes) for item in job.items) and job.specs == [1, 2, 4]
    # the pipeline's kinds run in Spark's default pool, set as explicitly as the others'
    launch(sc, PIPELINE_SQUARES, [1], description="one")
    assert (sc.jobs[-1].group, sc.jobs[-1].pool, sc.jobs[-1].slices) == (JobGroup.PIPELINE, "default", 1)
    assert launch(sc, SQUARES, [], description="none") == [] and len(sc.jobs) == 2   # no spec: no job


def test_the_executor_side_turns_a_pickled_spec_into_a_pickled_result():
    assert pickle.loads(run_pickled(_square, pickle.dumps(5))) == 25


def test_a_failed_job_raises_what_spark_raised_and_a_stopped_spark_raises_spark_stopped():
    sc = FakeSparkContext()
    with pytest.raises(ValueError, match="three breaks"):
        launch(sc, SQUARES, [1, 3], description="x")
    sc.stopped = True
    sc.failure = RuntimeError("py4j.protocol.Py4JError\nValueError: the JVM is gone")
    with pytest.raises(SparkStopped, match="ValueError: the JVM is gone"):
        launch(sc, SQUARES, [1], description="x")


def test_an_isolated_job_that_fails_runs_each_spec_alone_and_aborts_only_the_one_that_breaks():
    sc = FakeSparkContext()
    ran = launch_isolated(sc, SQUARES, [1, 3, 4], description="x", stopping=lambda: False)
    assert ran.results == [1, 16] and [(spec, str(e)) for spec, e in ran.failed] == [(3, "three breaks its task")]
    assert [len(job.items) for job in sc.jobs] == [3, 1, 1, 1]   # the job, then a job per spec
    ok = launch_isolated(sc, SQUARES, [1, 2], description="x", stopping=lambda: False)
    assert ok.results == [1, 4] and ok.failed == [] and len(sc.jobs) == 5


def test_an_isolated_job_is_not_retried_spec_by_spec_when_stopping_or_when_spark_stopped():
    sc = FakeSparkContext()
    with pytest.raises(ValueError):
        launch_isolated(sc, SQUARES, [1, 3], description="x", stopping=lambda: True)
    sc.stopped = True
    with pytest.raises(SparkStopped):
        launch_isolated(sc, SQUARES, [1, 3], description="x", stopping=lambda: False)
    assert len(sc.jobs) == 2


def test_cancelling_a_group_cancels_its_jobs():
    sc = FakeSparkContext()
    cancel(sc, JobGroup.MILVUS_IMPORT)
    assert sc.cancelled == ["deltanode-milvus-import"]
