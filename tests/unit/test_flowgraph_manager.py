"""The DataNode's channel handler refuses what it must not start."""

import pytest
from deltanode.datanode.flowgraphs import (
    FlowgraphManager,
    FlowgraphSettings,
    summarize_error,
)
from deltanode.storage.layout import StorageLayout
from deltanode.wire.datapb import ChannelWatchInfo, VchannelInfo
from deltanode.wire.names import UnsafeNameError


def manager(tmp_path):
    return FlowgraphManager(None, StorageLayout(str(tmp_path)), 1, FlowgraphSettings("127.0.0.1:1", str(tmp_path)))


@pytest.mark.parametrize("name", ["../../etc/passwd_1v0", "a/b_1v0"])
def test_a_hostile_vchannel_name_is_refused_before_anything_starts(tmp_path, name):
    with pytest.raises(UnsafeNameError):
        manager(tmp_path).watch(ChannelWatchInfo(vchan=VchannelInfo(collectionID=1, channelName=name)))
    assert list(tmp_path.iterdir()) == []


def test_a_watch_without_schema_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no collection schema"):
        manager(tmp_path).watch(ChannelWatchInfo(vchan=VchannelInfo(collectionID=1, channelName="p_1_1v0")))


def test_summarize_error_finds_the_python_cause_in_a_query_failure():
    text = ("[STREAM_FAILED] Query terminated with exception: org.apache.spark.SparkException: boom\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
            "deltanode.etcd.fence.OwnershipLost: session key gone\n\n== Plan ==\n+- ~Scan deltanode_vchannel")
    assert summarize_error(text) == "deltanode.etcd.fence.OwnershipLost: session key gone"
