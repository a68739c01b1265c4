"""An object store that does not answer, as DeltaNode recognises and tells it: botocore's
connection, timeout and 5xx errors, delta-rs's and pyarrow's words for them, ``CommitInDoubt``
(``failure.causes``); the driver's failure kind ``STORE_UNREACHABLE``, retried every
``BACK_OFF_EVERY`` seconds, told once for the node, and no reason for ``/healthz`` to fail
while ``/readyz`` does. Errors the store answered definitely (access denied, no such bucket) keep
their kind. Pure logic and real exceptions; tests/integration/test_object_storage_faults.py breaks
a real S3 protocol server."""

from __future__ import annotations

import logging
import time

import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

from deltanode.datanode.metrics import NodeView, health, readiness
from deltanode.delta.delta_log import CommitInDoubt
from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import is_object_store
from deltanode.failure.causes import store_unanswered as unreachable
from deltanode.failure.classify import BACK_OFF_EVERY, Failure, classify
from deltanode.failure.kinds import Action, FailureKind
from deltanode.pipeline.vchannel_stops import VchannelStops

from .vchannels import flowgraph

URL = "http://minio:9000/deltanode/t/_delta_log/00000000000000000007.json"


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


@pytest.mark.parametrize("error", [
    EndpointConnectionError(endpoint_url=URL),
    ConnectTimeoutError(endpoint_url=URL),
    ReadTimeoutError(endpoint_url=URL),
    client_error("SlowDown", 503),
    client_error("ServiceUnavailable", 503),
    client_error("InternalError", 500),
    CommitInDoubt("s3://deltanode/t", 7, "txn-1", ReadTimeoutError(endpoint_url=URL)),
    OSError("Generic S3 error: Error after 10 retries in 2.1s, max_retries:10, retry_timeout:180s, source:error "
            "sending request for url (http://minio:9000/deltanode/t/_delta_log/)"),
    OSError("When uploading part for key 't/insert_log/1/a.parquet': AWS Error NETWORK_CONNECTION during UploadPart "
            "operation: curlCode: 7, Couldn't connect to server"),
    "org.apache.spark.api.python.PythonException: ...\nOSError: AWS Error SLOW_DOWN during PutObject operation: Please "
    "reduce your request rate.\n\tat ...",
])
def test_an_object_store_that_does_not_answer_is_read_from_each_layers_words(error):
    assert unreachable(error) is not None


@pytest.mark.parametrize("error", [
    client_error("AccessDenied", 403),
    client_error("NoSuchBucket", 404),
    FileNotFoundError("s3://deltanode/t/_delta_log/00000000000000000007.json"),
    ValueError("bad row"),
    "OSError: AWS Error ACCESS_DENIED during PutObject operation",
])
def test_an_answer_the_store_gave_is_not_an_outage(error):
    assert unreachable(error) is None


def test_the_kind_is_store_unreachable_only_for_an_object_store_root():
    error = EndpointConnectionError(endpoint_url=URL)
    def commit_failed(where: str) -> Failure:
        return classify(error, kind=FailureKind.COMMIT_FAILED, where=where, step="committing",
                        store=is_object_store(where))
    on_s3 = commit_failed("s3://deltanode/t")
    assert on_s3.kind is FailureKind.STORE_UNREACHABLE and on_s3.outside and on_s3.action is Action.BACK_OFF
    assert on_s3.message.startswith("s3://deltanode/t: ") and on_s3.message.endswith("(committing)")
    assert commit_failed("/data/delta").kind is FailureKind.COMMIT_FAILED
    task = Failure(kind=FailureKind.ROUTER, message="OSError: AWS Error NETWORK_CONNECTION during PutObject")
    on_s3_task = classify(task, where="s3://deltanode/t", store=True)
    assert on_s3_task.kind is FailureKind.STORE_UNREACHABLE and on_s3_task.message.endswith(f"({FailureKind.ROUTER})")
    assert classify(task, where="/data/delta", store=False) is task


def test_the_outage_is_told_once_retried_every_few_seconds_and_fails_readiness_not_liveness(caplog):
    caplog.set_level(logging.DEBUG, logger="deltanode")
    policy = VchannelStops(storage=StorageLayout("s3://deltanode/t"), fence=None, load=lambda fg: None,
                           forget_topic=lambda p: None)
    members = [flowgraph(1, 0), flowgraph(1, 1), flowgraph(2, 0)]
    now = time.monotonic()
    for _ in range(3):
        for fg in members:
            policy.fail(fg, classify(EndpointConnectionError(endpoint_url=URL), kind=FailureKind.RESTART_FAILED,
                                     where="s3://deltanode/t", step="loading it from Delta", store=True), now)
    assert all(fg.retry_at == now + BACK_OFF_EVERY and fg.failures == 3 for fg in members)
    told = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelname for r in told] == ["ERROR"] and "object storage unreachable at s3://deltanode/t" in \
        told[0].getMessage()
    view = NodeView(node_id=lambda: 5, snapshots=lambda: [fg.snapshot() for fg in members],
                    high_watermark=lambda p: None, pipeline_alive=lambda: True, etcd_down_since=lambda: None,
                    etcd_error=str, sessions_lost=lambda: 0, store_down_since=lambda: policy.store.down_since,
                    store_error=lambda: policy.store.error)
    ok, body = health(view)
    assert ok and body["failing"] == {} and body["waiting_outside"] == 3
    assert body["object_storage"].startswith("unreachable for ")
    ready, body = readiness(view)
    assert not ready and body["outages"][0].startswith("object storage unreachable for ")
