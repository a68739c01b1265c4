"""Checkpoints published durably (``storage.checkpoints``): written by delta-rs beside the log,
readable by delta-rs once published, and a torn last checkpoint (what a power cut leaves of an
unsynced one) passed over rather than failing every later checkpoint."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltanode.delta.checkpoints import SCRATCH, write_checkpoint


def _append(path, values: list[int]) -> None:
    for v in values:
        write_deltalake(str(path), pa.table({"x": [v]}), mode="append")


def _rows(path) -> list[int]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("x").to_pylist())


def _hint(path) -> dict:
    return json.loads((path / "_delta_log" / "_last_checkpoint").read_bytes())


def test_a_checkpoint_is_published_with_its_hint_and_no_scratch_left(tmp_path):
    _append(tmp_path, range(5))
    assert write_checkpoint(str(tmp_path)) == 4
    assert _hint(tmp_path)["version"] == 4
    assert (tmp_path / "_delta_log" / f"{4:020d}.checkpoint.parquet").stat().st_size > 0
    assert os.listdir(tmp_path / SCRATCH) == []
    assert write_checkpoint(str(tmp_path)) is None   # nothing new since
    _append(tmp_path, [5, 6])
    assert write_checkpoint(str(tmp_path)) == 6
    assert _hint(tmp_path)["version"] == 6
    assert _rows(tmp_path) == list(range(7))


def test_a_torn_last_checkpoint_is_passed_over_and_the_table_readable_again(tmp_path):
    _append(tmp_path, range(3))
    assert write_checkpoint(str(tmp_path)) == 2
    _append(tmp_path, [3])
    torn = tmp_path / "_delta_log" / f"{2:020d}.checkpoint.parquet"
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
    with pytest.raises(Exception, match="(?i)parquet"):   # delta-kernel refuses the whole table
        DeltaTable(str(tmp_path))
    assert write_checkpoint(str(tmp_path)) == 3
    assert _hint(tmp_path)["version"] == 3
    assert _rows(tmp_path) == [0, 1, 2, 3]
