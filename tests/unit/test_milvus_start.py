"""Where a mirrored vchannel starts when the broker no longer holds its collection's start."""

import pytest

from deltanode.datacoord.catalog import CatalogError, StartPosition
from deltanode.datacoord.milvus_catalog import start_after_retention

CREATED = StartPosition(offset=42, ts=1000)


def test_milvus_checkpoint_is_taken_and_the_gap_recorded():
    start, gap = start_after_retention("p_1v0", CREATED, 500, StartPosition(offset=900, ts=9000), "by-dev/meta")
    assert start == StartPosition(offset=900, ts=9000)
    assert (gap.vchannel, gap.from_offset, gap.to_offset, gap.to_ts, gap.broker_first_offset) == \
        ("p_1v0", 42, 900, 9000, 500)


@pytest.mark.parametrize("checkpoint, held",
                         [(None, "is none"), (StartPosition(offset=100, ts=1), "offset 100, also gone")])
def test_no_usable_milvus_checkpoint_is_an_error_naming_the_offsets(checkpoint, held):
    with pytest.raises(CatalogError) as e:
        start_after_retention("p_1v0", CREATED, 500, checkpoint, "by-dev/meta")
    msg = str(e.value)
    assert msg.startswith("p_1v0: the broker's first offset on its pchannel is 500, past the collection's start "
                          "position 42") and "by-dev/meta/datacoord-meta/channel-cp/p_1v0" in msg and held in msg
