"""The power-cut filesystem's model (``tests/powercut_model.py``) on a real directory: a cut keeps
exactly what fsync made durable, file data and directory names apart."""

from __future__ import annotations

import os

import pytest

from ..powercut_model import PowerCutModel


@pytest.fixture
def fs(tmp_path):
    (tmp_path / "disk").mkdir()
    return PowerCutModel(str(tmp_path / "disk"), str(tmp_path / "stash"))


def _write(fs: PowerCutModel, path: str, data: bytes, *, sync: bool) -> None:
    fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        fs.write(fd, data, 0)
        if sync:
            fs.fsync(fd)
    finally:
        fs.close(fd)


def _read(fs: PowerCutModel, path: str) -> bytes | None:
    try:
        with open(fs.real(path), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def test_a_write_without_fsync_is_gone_after_a_cut(fs):
    _write(fs, "/a", b"unsynced", sync=False)
    assert _read(fs, "/a") == b"unsynced"   # every process sees it before the cut
    report = fs.cut()
    assert _read(fs, "/a") is None and report.names_dropped == 1


def test_an_fsynced_file_in_an_fsynced_directory_is_kept(fs):
    _write(fs, "/a", b"durable", sync=True)
    fs.fsyncdir("/")
    fs.cut()
    assert _read(fs, "/a") == b"durable"


def test_an_fsynced_file_whose_name_was_not_made_durable_is_gone(fs):
    _write(fs, "/a", b"data synced, name not", sync=True)
    fs.cut()
    assert _read(fs, "/a") is None


def test_a_durable_name_keeps_only_the_data_fsynced(fs):
    fd = fs.open("/a", os.O_WRONLY | os.O_CREAT)
    fs.write(fd, b"first", 0)
    fs.fsync(fd)
    fs.fsyncdir("/")
    fs.write(fd, b" then more", 5)
    fs.close(fd)
    _write(fs, "/b", b"never synced", sync=False)
    fs.fsyncdir("/")   # /b's name is durable, its data is not
    report = fs.cut()
    assert _read(fs, "/a") == b"first" and _read(fs, "/b") == b"" and report.files_reverted == 2


def test_a_link_without_a_directory_fsync_is_gone_and_the_removed_name_comes_back(fs):
    _write(fs, "/tmp", b"commit", sync=True)
    fs.fsyncdir("/")
    fs.link("/00.json", "/tmp")
    fs.unlink("/tmp")
    assert _read(fs, "/00.json") == b"commit" and _read(fs, "/tmp") is None
    report = fs.cut()
    assert _read(fs, "/00.json") is None and _read(fs, "/tmp") == b"commit"
    assert report.names_dropped == 1 and report.names_restored == 1


def test_a_link_made_durable_survives(fs):
    _write(fs, "/tmp", b"commit", sync=True)
    fs.link("/00.json", "/tmp")
    fs.unlink("/tmp")
    fs.fsyncdir("/")
    fs.cut()
    assert _read(fs, "/00.json") == b"commit" and _read(fs, "/tmp") is None


def test_a_new_directory_goes_with_everything_in_it_until_its_parent_is_fsynced(fs):
    fs.mkdir("/t")
    fs.mkdir("/t/_delta_log")
    _write(fs, "/t/_delta_log/0.json", b"v0", sync=True)
    fs.fsyncdir("/t/_delta_log")
    fs.fsyncdir("/t")
    fs.cut()
    assert not os.path.exists(fs.real("/t"))
    fs.mkdir("/t")
    fs.fsyncdir("/")
    fs.mkdir("/t/_delta_log")
    fs.fsyncdir("/t")
    _write(fs, "/t/_delta_log/0.json", b"v0", sync=True)
    fs.fsyncdir("/t/_delta_log")
    fs.cut()
    assert _read(fs, "/t/_delta_log/0.json") == b"v0"


def test_a_rename_over_a_durable_file_is_undone_without_a_directory_fsync(fs):
    _write(fs, "/_last_checkpoint", b"old", sync=True)
    fs.fsyncdir("/")
    _write(fs, "/staging", b"new", sync=True)
    fs.rename("/staging", "/_last_checkpoint")
    assert _read(fs, "/_last_checkpoint") == b"new"
    fs.cut()
    assert _read(fs, "/_last_checkpoint") == b"old" and _read(fs, "/staging") is None


def test_a_removed_durable_directory_comes_back_with_its_files(fs):
    fs.mkdir("/seg")
    _write(fs, "/seg/part-0.parquet", b"rows", sync=True)
    fs.fsyncdir("/seg")
    fs.fsyncdir("/")
    fs.unlink("/seg/part-0.parquet")
    fs.rmdir("/seg")
    fs.cut()
    assert _read(fs, "/seg/part-0.parquet") == b"rows"


def test_after_a_cut_everything_there_is_durable(fs):
    _write(fs, "/a", b"kept", sync=True)
    fs.fsyncdir("/")
    fs.cut()
    fs.cut()   # a second cut with nothing written in between changes nothing
    assert _read(fs, "/a") == b"kept"


def test_a_cut_after_the_kernel_wrote_everything_back_keeps_everything(fs):
    fs.mkdir("/t")
    _write(fs, "/t/a", b"written back, never fsynced", sync=False)
    report = fs.cut(names=1.0, data=1.0)
    assert _read(fs, "/t/a") == b"written back, never fsynced" and report.names_dropped == 0


def test_a_partial_writeback_keeps_some_unsynced_names_and_drops_others(fs):
    for i in range(40):
        fs.mkdir(f"/d{i}")
        _write(fs, f"/d{i}/f", b"x", sync=False)
    fs.fsyncdir("/")   # every directory's name durable; what each holds is up to the writeback
    fs.cut(names=0.5, data=0.5, seed=3)
    kept = [i for i in range(40) if _read(fs, f"/d{i}/f") is not None]
    assert 0 < len(kept) < 40
    torn = [i for i in kept if _read(fs, f"/d{i}/f") == b""]   # the name written back, the data not
    assert 0 < len(torn) < len(kept)
