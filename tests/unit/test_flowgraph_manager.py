"""The DataNode's channel handler refuses what it must not start, before the pipeline sees it."""

import pytest

from deltanode.datanode.channel_handler import FlowgraphManager
from deltanode.delta.layout import StorageLayout
from deltanode.jobs.launch import summarize_error
from deltanode.mq.broker import Broker
from deltanode.pipeline.pipeline import Pipeline
from deltanode.wire.datapb import ChannelWatchInfo, VchannelInfo
from deltanode.wire.names import UnsafeNameError


def manager(tmp_path):
    """A handler over a pipeline that never started (no Spark, no broker is reached)."""
    return FlowgraphManager(Pipeline(None, StorageLayout(str(tmp_path)), Broker("kafka", "127.0.0.1:1")))


@pytest.mark.parametrize("name", ["../../etc/passwd_1v0", "a/b_1v0"])
def test_a_hostile_vchannel_name_is_refused_before_anything_starts(tmp_path, name):
    with pytest.raises(UnsafeNameError):
        manager(tmp_path).watch(ChannelWatchInfo(vchan=VchannelInfo(collectionID=1, channelName=name)), lambda: None)
    assert list(tmp_path.iterdir()) == []


def test_a_watch_without_schema_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no collection schema"):
        info = ChannelWatchInfo(vchan=VchannelInfo(collectionID=1, channelName="p_1_1v0"))
        manager(tmp_path).watch(info, lambda: None)


def test_summarize_error_finds_the_python_cause_in_a_job_failure():
    text = ("org.apache.spark.SparkException: Job aborted due to stage failure: boom\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
            "deltanode.mq.kafka.BrokerError: p[0] offset 3 is no longer on the broker\n\n"
            "\tat org.apache.spark.api.python.BasePythonRunner")
    assert summarize_error(text) == "deltanode.mq.kafka.BrokerError: p[0] offset 3 is no longer on the broker"
