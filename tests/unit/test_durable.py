"""``storage.durable``'s directories: made once per process, made again (parents too) when removed
since. Whether they survive a power cut is the power-cut tests' part (test_power_loss.py)."""

from __future__ import annotations

import shutil

from deltanode.delta import durable


def test_a_directory_removed_since_is_made_again_with_its_parents(tmp_path):
    leaf = str(tmp_path / "insert_log" / "7" / "_delta_log")
    durable.make_dirs(leaf, sync=True)
    shutil.rmtree(tmp_path / "insert_log")
    durable.make_dirs(leaf, sync=True)   # known to this process: no system call
    assert not (tmp_path / "insert_log").exists()
    durable.make_dirs(leaf, sync=True, again=True)
    assert (tmp_path / "insert_log" / "7" / "_delta_log").is_dir()


def test_a_directory_made_without_sync_is_synced_when_asked(tmp_path, monkeypatch):
    leaf = str(tmp_path / "a" / "b")
    durable.make_dirs(leaf, sync=False)
    synced = []
    monkeypatch.setattr(durable, "sync_dir", synced.append)
    durable.make_dirs(leaf, sync=True)
    assert synced[-2:] == [str(tmp_path), str(tmp_path / "a")]   # each parent, the leaf's last
    durable.make_dirs(leaf, sync=True)
    assert len(synced) == len(set(synced))   # once per directory and process
