"""ChannelWatcher (DataNode side of MEP 7) against a real etcd."""

from __future__ import annotations

import threading
import time

import pytest

from deltanode.datanode.channel_watch import ChannelWatcher
from deltanode.datanode.watch_answers import WatchAnswers
from deltanode.etcd import keys
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState, VchannelInfo

from .support import wait_until

S = ChannelWatchState
NODE = 7


class RecordingHandler:
    """Records calls; ``fail`` makes watch/release raise, ``gates`` hold a watch until set (reporting
    progress every 0.1 s for the vchannels in ``progressing``, hanging for the others)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail: set[str] = set()
        self.gates: dict[str, threading.Event] = {}
        self.progressing: set[str] = set()
        self.started = threading.Event()

    def watch(self, info: ChannelWatchInfo, progressed) -> None:
        vchannel = info.vchan.channelName
        self.calls.append(("watch", vchannel))
        self.started.set()
        if vchannel in self.gates:
            deadline = time.monotonic() + 10
            while not self.gates[vchannel].wait(0.1):
                assert time.monotonic() < deadline, "test gate never opened"
                if vchannel in self.progressing:
                    progressed()
        if "watch" in self.fail:
            raise RuntimeError("cannot start the stream")

    def release(self, vchannel: str) -> None:
        self.calls.append(("release", vchannel))
        if "release" in self.fail:
            raise RuntimeError("cannot stop the stream")


@pytest.fixture
def handler():
    return RecordingHandler()


@pytest.fixture
def watcher(client, etcd_root, handler):
    w = ChannelWatcher(client, etcd_root, NODE, handler, tickle_interval=0.2).start()
    yield w
    for gate in handler.gates.values():
        gate.set()
    w.stop()


def key(root, vchannel):
    return keys.channel_watch_key(root, NODE, vchannel)


def write(client, root, vchannel, state, progress=0, op_id=42):
    info = ChannelWatchInfo(vchan=VchannelInfo(collectionID=1, channelName=vchannel), state=state,
                            progress=progress, opID=op_id)
    client.put(key(root, vchannel), info.SerializeToString())


def read(client, root, vchannel):
    current = client.get(key(root, vchannel))
    return None if current is None else (ChannelWatchInfo.FromString(current[0]), current[1])


def wait_state(client, root, vchannel, state):
    def reached():
        current = read(client, root, vchannel)
        return current if current and current[0].state == state else None
    return wait_until(reached, what=f"{vchannel} in {S.name(state)}")


def test_to_watch_is_watched_once_and_answered(client, etcd_root, handler, watcher):
    write(client, etcd_root, "ch0", S.ToWatch)
    info, version = wait_state(client, etcd_root, "ch0", S.WatchSuccess)
    assert (info.progress, info.opID, info.vchan.channelName) == (0, 42, "ch0")
    assert version == 2
    time.sleep(0.3)  # our own WatchSuccess comes back as an event and must be ignored
    assert handler.calls == [("watch", "ch0")]
    assert watcher.owned() == {"ch0"}


def test_failed_watch_is_answered_with_watch_failure(client, etcd_root, handler, watcher):
    handler.fail.add("watch")
    write(client, etcd_root, "ch0", S.ToWatch)
    wait_state(client, etcd_root, "ch0", S.WatchFailure)
    assert handler.calls == [("watch", "ch0")]
    assert watcher.owned() == set()


def test_to_release_releases_and_answers(client, etcd_root, handler, watcher):
    write(client, etcd_root, "ch0", S.ToWatch)
    wait_state(client, etcd_root, "ch0", S.WatchSuccess)
    write(client, etcd_root, "ch0", S.ToRelease)
    wait_state(client, etcd_root, "ch0", S.ReleaseSuccess)
    assert handler.calls == [("watch", "ch0"), ("release", "ch0")]
    assert watcher.owned() == set()


def test_failed_release_is_answered_with_release_failure(client, etcd_root, handler, watcher):
    write(client, etcd_root, "ch0", S.ToWatch)
    wait_state(client, etcd_root, "ch0", S.WatchSuccess)
    handler.fail.add("release")
    write(client, etcd_root, "ch0", S.ToRelease)
    wait_state(client, etcd_root, "ch0", S.ReleaseFailure)
    assert watcher.owned() == set()


def test_deleted_key_releases_the_channel(client, etcd_root, handler, watcher):
    write(client, etcd_root, "ch0", S.ToWatch)
    wait_state(client, etcd_root, "ch0", S.WatchSuccess)
    client.delete(key(etcd_root, "ch0"))
    wait_until(lambda: ("release", "ch0") in handler.calls, what="release")
    assert watcher.owned() == set()


def test_key_changed_during_watch_releases_the_channel(client, etcd_root, handler, watcher):
    handler.gates["ch0"] = threading.Event()
    write(client, etcd_root, "ch0", S.ToWatch)
    assert handler.started.wait(5)
    write(client, etcd_root, "ch0", S.ToWatch, op_id=43)  # the coordinator re-issues it meanwhile
    handler.gates["ch0"].set()
    info, _ = wait_state(client, etcd_root, "ch0", S.WatchSuccess)
    # The first WatchSuccess swap failed, so that watch was released; the new one then ran.
    assert info.opID == 43
    assert handler.calls == [("watch", "ch0"), ("release", "ch0"), ("watch", "ch0")]
    assert watcher.owned() == {"ch0"}


def test_tickler_bumps_progress_while_a_slow_watch_progresses(client, etcd_root, handler, watcher):
    progress = []
    observer = client.watch_prefix(key(etcd_root, "ch0"),
                                   lambda e: progress.append(ChannelWatchInfo.FromString(e.value).progress))
    handler.gates["ch0"] = threading.Event()
    handler.progressing.add("ch0")
    write(client, etcd_root, "ch0", S.ToWatch)
    wait_until(lambda: len(progress) >= 4, what="three tickles")
    handler.gates["ch0"].set()
    info, version = wait_state(client, etcd_root, "ch0", S.WatchSuccess)
    observer.cancel()
    tickles = [p for p in progress if p > 0]
    assert tickles == list(range(1, len(tickles) + 1))
    assert info.progress == 0
    assert version == 2 + len(tickles)  # the final swap used the version left by the last tickle
    assert handler.calls == [("watch", "ch0")]  # tickles are not taken for new work


def test_a_hung_watch_is_not_tickled_so_the_coordinator_times_it_out(client, etcd_root, handler, watcher):
    changes = []
    observer = client.watch_prefix(key(etcd_root, "ch0"), lambda e: changes.append(e))
    handler.gates["ch0"] = threading.Event()
    write(client, etcd_root, "ch0", S.ToWatch)
    assert handler.started.wait(5)
    time.sleep(1.0)   # five tickle intervals
    assert [ChannelWatchInfo.FromString(e.value).progress for e in changes] == [0]   # only the ToWatch itself
    handler.gates["ch0"].set()
    wait_state(client, etcd_root, "ch0", S.WatchSuccess)
    observer.cancel()


def test_channels_are_independent(client, etcd_root, handler, watcher):
    handler.gates["slow"] = threading.Event()
    write(client, etcd_root, "slow", S.ToWatch)
    assert handler.started.wait(5)
    write(client, etcd_root, "fast", S.ToWatch)
    wait_state(client, etcd_root, "fast", S.WatchSuccess)
    assert read(client, etcd_root, "slow")[0].state == S.ToWatch
    handler.gates["slow"].set()
    wait_state(client, etcd_root, "slow", S.WatchSuccess)
    assert watcher.owned() == {"slow", "fast"}


def test_keys_present_at_start_are_handled_and_end_states_ignored(client, etcd_root, handler):
    write(client, etcd_root, "pending", S.ToWatch)
    write(client, etcd_root, "done", S.WatchSuccess)
    write(client, etcd_root, "tickled", S.ToWatch, progress=3)
    w = ChannelWatcher(client, etcd_root, NODE, handler, tickle_interval=0.2).start()
    try:
        wait_state(client, etcd_root, "pending", S.WatchSuccess)
        time.sleep(0.3)
        assert handler.calls == [("watch", "pending")]
        assert w.owned() == {"pending"}
    finally:
        w.stop()


class HeldFirstAnswer:
    """The etcd client, except that the first answer written alone waits for ``release``."""

    def __init__(self, client) -> None:
        self.client, self.release = client, threading.Event()

    def compare_version_and_swap(self, key: str, version: int, value: bytes) -> bool:
        assert self.release.wait(10)
        return self.client.compare_version_and_swap(key, version, value)

    def compare_versions_and_swap(self, items) -> bool:
        return self.client.compare_versions_and_swap(items)


def answer_all(answers: WatchAnswers, root: str, names: list[str], release: threading.Event) -> dict[str, bool]:
    """Every name's answer from a thread of its own; the first goes alone and is held until the others wait."""
    results: dict[str, bool] = {}

    def answer(name: str) -> None:
        results[name] = answers.swap(key(root, name), 1, f"answer {name}".encode())

    threads = [threading.Thread(target=answer, args=(name,)) for name in names]
    threads[0].start()
    time.sleep(0.2)   # the first name's answer is the one held
    for t in threads[1:]:
        t.start()
    time.sleep(0.5)   # the others queue behind it
    release.set()
    for t in threads:
        t.join(10)
    answers.close()
    return results


def test_answers_waiting_together_go_in_one_transaction(client, etcd_root):
    """41 answers: the first alone, the 40 that waited meanwhile in one transaction (one etcd revision)."""
    names = [f"ch{i}" for i in range(41)]
    for name in names:
        write(client, etcd_root, name, S.ToWatch)
    held = HeldFirstAnswer(client)
    results = answer_all(WatchAnswers(held, "test answers"), etcd_root, names, held.release)
    assert results == {name: True for name in names}
    revisions = set()
    for name in names:
        value, version, mod_revision = client.get(key(etcd_root, name))
        assert (value, version) == (f"answer {name}".encode(), 2)
        revisions.add(mod_revision)
    assert len(revisions) == 2


def test_a_key_moved_meanwhile_fails_alone(client, etcd_root):
    """The coordinator moved one key of a batch: its transaction fails, each answer goes alone, and
    only that one is refused (the key keeps the coordinator's value)."""
    names = [f"ch{i}" for i in range(20)]
    for name in names:
        write(client, etcd_root, name, S.ToWatch)
    write(client, etcd_root, "ch7", S.ToWatch, op_id=43)   # moved: now at version 2
    held = HeldFirstAnswer(client)
    answers = WatchAnswers(held, "test answers")
    results = answer_all(answers, etcd_root, names, held.release)
    assert results == {name: name != "ch7" for name in names}
    assert read(client, etcd_root, "ch7")[0].opID == 43
    assert all(client.get(key(etcd_root, name))[0] == f"answer {name}".encode() for name in names if name != "ch7")
    assert not answers.swap(key(etcd_root, "ch7"), 1, b"late")   # after close: written alone, still compared
