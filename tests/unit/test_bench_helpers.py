"""Pure helpers of the benchmark: percentiles, commit matching, RSS windows, table layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deltanode_bench import latency as lat
from deltanode_bench.main import parse_args
from deltanode_bench.procs import Sample, _machine_busy, classify, window
from deltanode_bench.report import short_channel, table
from deltanode_bench.tasks import busy_while_full, running, task_spans


def test_percentile_interpolates_between_ranks():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert lat.percentile(xs, 0) == 1.0
    assert lat.percentile(xs, 50) == 3.0
    assert lat.percentile(xs, 100) == 5.0
    assert lat.percentile(xs, 25) == 2.0
    assert lat.percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert lat.percentile([7.0], 99) == 7.0


def test_percentile_rejects_empty_and_out_of_range():
    with pytest.raises(ValueError):
        lat.percentile([], 50)
    with pytest.raises(ValueError):
        lat.percentile([1.0], 101)


def test_commits_come_from_the_delta_log_per_vchannel_oldest_first(tmp_path):
    from deltanode.delta.layout import StorageLayout
    from deltanode.state.channel_state import ChannelState
    from deltanode.state.commit import (
        CollectionCommitter,
        QuarantineLog,
        VchannelSync,
        Watermarks,
    )
    from deltanode.wire.schema import CollectionLayout, schema_from_json
    layout = CollectionLayout.from_proto(schema_from_json(
        {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}, "c"))
    storage = StorageLayout(str(tmp_path))
    c = CollectionCommitter(storage, 1, layout.insert_schema(), layout.delete_schema(), QuarantineLog(storage))

    def sync(v, start, end, rows):
        return VchannelSync(ChannelState(v, 1, "p", checkpoint_offset=end, rows=rows), Watermarks(start), ())

    c.commit([sync("a", None, 5, 10), sync("b", None, 4, 0)])
    c.commit([sync("a", 5, 9, 20)])
    commits = lat.commits_from_log(storage.insert_log(1))
    assert [(x.version, x.end, x.rows) for x in commits["a"]] == [(1, 5, 10), (2, 9, 20)]
    assert [(x.version, x.end) for x in commits["b"]] == [(1, 4)]
    assert commits["a"][0].t <= commits["a"][1].t


def test_latency_uses_first_commit_covering_the_offset():
    commits = [lat.Commit(1, 5, 10.0, 0), lat.Commit(2, 9, 11.5, 0)]
    assert lat.commit_of(commits, 4).version == 1
    assert lat.commit_of(commits, 5).version == 2   # end is exclusive
    assert lat.commit_of(commits, 9) is None
    lats, missing = lat.latencies([(0, 9.5), (6, 11.0), (12, 11.2)], commits)
    assert lats == pytest.approx([0.5, 0.5])
    assert missing == 1


def test_wire_bytes_warm_rate_and_upto():
    sizes = [(0, 100), (1, 100), (2, 100), (3, 100), (4, 100)]
    assert lat.wire_bytes(sizes, 1, 4) == 300
    commits = [lat.Commit(1, 2, 10.0, 0), lat.Commit(2, 4, 11.0, 0), lat.Commit(3, 5, 12.0, 0),
               lat.Commit(4, 6, 13.0, 0)]
    assert lat.upto(commits, 5) == commits[:3]
    assert lat.warm_rate(commits[:3], sizes) == pytest.approx(300 / 2.0)
    assert lat.warm_rate(commits[:1], sizes) is None


def test_classify_separates_driver_jvm_and_workers():
    procs = {10: ("python", 1), 11: ("java", 10), 12: ("python", 11), 13: ("python", 12),
             14: ("python", 11), 20: ("python", 1), 15: ("rdk:broker", 10)}
    kinds = classify(10, procs, is_service=lambda pid: False)
    assert kinds == {10: "driver", 11: "jvm", 12: "worker", 13: "worker", 14: "worker", 15: "worker"}


def test_classify_finds_the_driver_spark_submit_starts_under_the_jvm():
    # ./spark-submit.sh (bash) -> java -> python app/main.py (the driver), python -m pyspark.daemon
    procs = {10: ("bash", 1), 11: ("java", 10), 12: ("python", 11), 13: ("python", 11), 14: ("python", 13),
             15: ("etcd", 12)}
    kinds = classify(10, procs, ("etcd",), is_driver=lambda pid: pid == 12, is_service=lambda pid: False)
    assert kinds == {10: "driver", 11: "jvm", 12: "driver", 13: "worker", 14: "worker", 15: "excluded"}


def test_classify_leaves_out_the_embedded_kafka_a_java_process_under_the_driver():
    # ... -> python app/main.py (the driver) -> java kafka.Kafka (the embedded broker), etcd
    procs = {10: ("bash", 1), 11: ("java", 10), 12: ("python", 11), 13: ("python", 11), 16: ("java", 12),
             17: ("etcd", 12)}
    kinds = classify(10, procs, ("etcd",), is_driver=lambda pid: pid == 12, is_service=lambda pid: pid == 16)
    assert kinds == {10: "driver", 11: "jvm", 12: "driver", 13: "worker", 16: "excluded", 17: "excluded"}


def test_window_gives_peaks_and_busy_cores():
    s = [Sample(0.0, 10, 100, 5, 5, 1, 0.0, 0.0, 0.0, 0.0, cpu_broker=5.0, cpu_machine=100.0),
         Sample(1.0, 12, 90, 30, 20, 2, 1.5, 0.1, 0.9, 0.5, cpu_broker=5.2, cpu_machine=101.8),
         Sample(2.0, 11, 95, 8, 8, 1, 3.0, 0.2, 1.8, 1.0, cpu_broker=5.6, cpu_machine=103.8),
         Sample(3.0, 99, 99, 99, 99, 9, 9.0, 9.0, 9.0, 9.0, cpu_broker=9.0, cpu_machine=999.0)]
    w = window(s, 0.0, 2.0)
    assert (w.driver_peak, w.jvm_peak, w.workers_peak, w.worker_max_peak, w.workers_max_count) == (12, 100, 30, 20, 2)
    assert w.cores == pytest.approx(1.5)
    assert w.cores_jvm == pytest.approx(0.9)
    assert (w.cores_broker, w.cores_machine) == (pytest.approx(0.3), pytest.approx(1.9))
    assert window(s, 5.0, 6.0) is None


def test_machine_busy_counts_every_core_but_idle_and_iowait():
    a = _machine_busy()
    spin = time.process_time() + 0.2
    while time.process_time() < spin:
        pass
    assert _machine_busy() - a >= 0.15


def test_table_aligns_columns_and_rejects_ragged_rows():
    text = table(["dim", "vch", "MB/s"], [[768, "v0", "12.5"], [128, "total", "1,234.0"]], indent="")
    lines = text.splitlines()
    assert lines[0] == "dim  vch       MB/s"
    assert lines[1] == "---  -----  -------"
    assert lines[2] == "768  v0        12.5"
    assert lines[3] == "128  total  1,234.0"
    with pytest.raises(ValueError):
        table(["a", "b"], [[1]])


def test_short_channel():
    assert short_channel("bench1-rootcoord-dml_0_1v0") == "v0"
    assert short_channel("odd") == "odd"


def test_quick_fills_only_what_was_not_given():
    a = parse_args(["--quick", "--messages", "9"])
    assert a.messages == 9 and a.dim_list == [768] and a.factors == [3]
    d = parse_args([])
    assert d.dim_list == [128, 768] and d.messages == 30 and d.factors == [3, 10] and not d.quick
    with pytest.raises(SystemExit):
        parse_args(["--dims", "x"])


def test_largest_batch_from_commit_ends():
    sizes = [(0, 10), (1, 20), (2, 30), (3, 40), (5, 1)]
    commits = [lat.Commit(1, 2, 1.0, 0), lat.Commit(2, 4, 2.0, 0), lat.Commit(3, 6, 3.0, 0)]
    assert lat.largest_batch(commits, sizes, 0) == 70
    assert lat.largest_batch(commits[1:], sizes, 2) == 70
    assert lat.largest_batch([], sizes, 0) == 0


def test_task_concurrency_from_spans():
    spans = [(0.0, 4.0), (1.0, 3.0), (5.0, 6.0), (5.5, 9.0)]
    got = running(spans, 0.0, 8.0)
    assert got == {1: pytest.approx(4.5), 2: pytest.approx(2.5), 0: pytest.approx(1.0)}
    assert sum(got.values()) == pytest.approx(8.0)
    assert running([], 0.0, 2.0) == {0: 2.0}


def test_machine_busy_only_inside_full_stretches():
    def at(t: float, machine: float) -> Sample:
        return Sample(t, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, cpu_machine=machine)
    samples = [at(0.0, 0.0), at(1.0, 1.0), at(2.0, 3.0), at(3.0, 5.0), at(4.0, 5.5)]
    # two tasks from 1.0 to 3.2: the intervals [1, 2] and [2, 3] (2 cores busy each) count, [3, 4] does not
    assert busy_while_full([(0.5, 3.2), (1.0, 3.2)], samples, 0.0, 4.0, 2) == pytest.approx(2.0)
    assert busy_while_full([(0.5, 3.2)], samples, 0.0, 4.0, 2) is None
    assert busy_while_full([(0.5, 2.2), (1.0, 2.2)], samples, 0.0, 4.0, 2) == pytest.approx(2.0)  # [1, 2] only
    assert busy_while_full([(0.5, 2.2), (1.0, 2.2)], samples, 0.0, 4.0, 2, min_seconds=1.5) is None


def test_task_spans_read_finished_tasks_from_the_event_log(tmp_path):
    lines = [{"Event": "SparkListenerTaskStart", "Task Info": {"Launch Time": 1000}},
             {"Event": "SparkListenerTaskEnd", "Task Info": {"Launch Time": 1000, "Finish Time": 2500}}]
    (tmp_path / "eventlog_v2_local-1").mkdir()
    (tmp_path / "eventlog_v2_local-1" / ".events_1_local-1.crc").write_text("not json")
    (tmp_path / "eventlog_v2_local-1" / "events_1_local-1").write_text("\n".join(json.dumps(x) for x in lines)
                                               + '\n{"Event":"SparkListenerTaskEnd","Task In')
    assert task_spans(str(tmp_path)) == [(1.0, 2.5)]


def test_disk_probe_times_three_writes_and_leaves_nothing(tmp_path, capsys):
    from deltanode_bench import disk_probe
    assert disk_probe.main([str(tmp_path), "--keep-mb", "3", "--write-mb", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all("cpu" in line and "wall" in line for line in lines[1:])
    assert list(tmp_path.iterdir()) == []


# -- the delete benchmark ------------------------------------------------------------------------
def test_visibility_tracker_resolves_a_batch_once_a_poll_that_asked_finds_none_of_its_keys():
    from deltanode_bench.visibility import VisibilityTracker
    t = VisibilityTracker()
    t.add(1, [10, 11], 100.0)
    t.add(2, [20], 100.5)
    asked, keys = t.query()
    assert asked == [1, 2] and keys == [10, 11, 20]
    assert t.observe(asked, {11}, 101.0) == [2]          # 11 still there: batch 1 pending
    assert t.latencies == {2: pytest.approx(0.5)} and t.pending == 1
    t.add(3, [30], 101.5)                                # sent while the next query runs
    assert t.observe(asked, set(), 102.0) == [1]         # that query never asked for 30
    assert t.latencies[1] == pytest.approx(2.0) and t.pending == 1
    assert t.observe([1, 2, 3], set(), 103.0) == [3]     # resolved batches are not resolved again
    assert t.query() == ([], [])
    with pytest.raises(ValueError):
        t.add(3, [31], 104.0)


def test_key_picker_picks_inserted_keys_once_and_knows_their_shard():
    from deltanode_bench.delete_load import KeyPicker
    k = KeyPicker(seed=3)
    k.add(1, 5, 0)
    k.add(6, 5, 1)
    k.add(100, 2, 0)
    assert k.total == 12
    assert [k.shard_of(x) for x in (1, 5, 6, 10, 100, 101)] == [0, 0, 1, 1, 0, 0]
    with pytest.raises(KeyError):
        k.shard_of(11)
    first = k.pick(7)
    rest = k.pick(5)
    assert len(set(first) | set(rest)) == 12 and set(first + rest) == set(range(1, 11)) | {100, 101}
    assert k.picked == set(first + rest)
    with pytest.raises(ValueError):
        k.pick(1)
    with pytest.raises(ValueError):
        k.add(101, 3, 1)                                 # overlaps the last range


def test_key_picker_sample_leaves_keys_unpicked():
    from deltanode_bench.delete_load import KeyPicker
    k = KeyPicker(seed=5)
    k.add(1, 10, 0)
    gone = set(k.pick(6))
    sample = k.sample(4)
    assert len(sample) == 4 and not gone & set(sample) and k.picked == gone
    assert set(sample) == set(range(1, 11)) - gone


def test_by_shard_splits_a_delete_as_the_proxy_does():
    from deltanode_bench.delete_load import by_shard
    assert by_shard([5, 2, 8, 3], lambda key: key % 2) == {0: [2, 8], 1: [5, 3]}
    assert list(by_shard([3, 2], lambda key: key % 2)) == [0, 1]
    assert by_shard([], lambda key: 0) == {}


def test_pace_keeps_each_stream_at_its_rate():
    from deltanode_bench.delete_load import Stream, next_stream, pace
    now = [0.0]
    log = []
    streams = [Stream(0.5, lambda: log.append(("insert", now[0]))), Stream(0.2, lambda: log.append(("delete", now[0])))]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    pace(streams, 1.0, lambda: now[0], sleep)
    assert [t for kind, t in log if kind == "insert"] == pytest.approx([0.0, 0.5])
    assert [t for kind, t in log if kind == "delete"] == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])
    assert next_stream(streams, 0.0) is streams[0]      # both due at 1.0: the first listed


def test_pace_catches_up_a_stream_that_fell_behind():
    from deltanode_bench.delete_load import Stream, pace
    now = [0.0]
    times = []

    def slow() -> None:                                  # the first send takes 0.35 s
        times.append(now[0])
        now[0] += 0.35 if len(times) == 1 else 0.0

    pace([Stream(0.1, slow)], 0.5, lambda: now[0], lambda s: now.__setitem__(0, now[0] + s))
    assert times == pytest.approx([0.0, 0.35, 0.35, 0.35, 0.4])


def test_batch_commit_latency_waits_for_every_shard():
    from deltanode_bench.deletes import batch_commit_latency
    from deltanode_bench.workload import Sent
    commits = {"v0": [lat.Commit(1, 5, 10.0, 0), lat.Commit(2, 9, 11.0, 0)], "v1": [lat.Commit(1, 3, 10.5, 0)]}
    where = {"p0": "v0", "p1": "v1"}
    reqs = [Sent("p0", 10, 0, 9.0, offset=6, deletes=2), Sent("p1", 10, 0, 9.0, offset=2, deletes=1)]
    assert batch_commit_latency(reqs, 9.0, where, commits) == pytest.approx(2.0)
    assert batch_commit_latency(reqs[:1] + [Sent("p1", 10, 0, 9.0, offset=3)], 9.0, where, commits) is None
    assert batch_commit_latency([Sent("p0", 10, 0, 9.0)], 9.0, where, commits) is None   # not delivered


def test_cycle_means_split_the_sync():
    from deltanode_bench.deletes import cycle_means
    cycles = [{"seconds": 1.0, "plan_s": 0.0, "job_s": 0.4, "apply_s": 0.0, "sync_s": 0.5, "mark_s": 0.3,
               "commit_seconds": [0.1]},
              {"seconds": 0.5, "plan_s": 0.0, "job_s": 0.2, "apply_s": 0.0, "sync_s": 0.3, "mark_s": 0.1,
               "commit_seconds": [0.05, 0.05]}]
    m = cycle_means(cycles)
    assert m["seconds"] == pytest.approx(0.75) and m["mark_s"] == pytest.approx(0.2)
    assert m["commits"] == pytest.approx(0.1) and m["sync rest"] == pytest.approx(0.1)
    assert cycle_means([])["seconds"] is None


def test_log_size_splits_commits_and_checkpoints(tmp_path):
    from deltanode_bench.deletes import LogSize, log_size, tree_size
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / "00000000000000000000.json").write_bytes(b"x" * 10)
    (log / "00000000000000000001.json").write_bytes(b"x" * 5)
    (log / "00000000000000000001.checkpoint.parquet").write_bytes(b"x" * 7)
    (log / "_last_checkpoint").write_bytes(b"x" * 3)
    assert log_size(str(tmp_path)) == LogSize(json=15, checkpoints=7)
    assert tree_size(str(tmp_path)) == 25


def test_deletes_options_and_deletes_only_implies_deletes():
    a = parse_args(["--deletes-only", "--deletes-seconds", "5"])
    assert a.deletes and a.deletes_only and a.deletes_seconds == 5.0 and a.delete_rate == 1000.0
    d = parse_args([])
    assert not d.deletes and d.deletes_rows == 1_000_000 and d.delete_batch == 200 and d.deletes_insert_mb_s == 1.0
    with pytest.raises(SystemExit):
        parse_args(["--deletes", "--delete-rate", "0"])


def test_scale_table_shows_the_services_cores_at_both_ends_of_the_load():
    from deltanode_bench.scale import ScaleResult, render
    result = ScaleResult("kafka", 1000, 500, 60.0, 60_000, 0.8, (0.16, 0.05, 0.59), 0.57, (0.41, 0.74), 1.5, 1 << 30,
                         [1.0, 2.0], 0, 470.0, 3_000_000, 3_000_000, None, 0.2, 3.0, 0.09)
    text = render([result], ["--scale", "1000"], 1000.0)
    assert "0.57 (0.41 -> 0.74)" in text and "first and last 10 s" in text
    assert "(- -> -)" in render([ScaleResult(**{**vars(result), "services_ends": (None, None)})], [], 1000.0)


def test_every_embedded_jvm_service_is_recognised_by_its_main_class():
    from deltanode_bench.procs import SERVICE_MAINS, _runs_service
    for main in SERVICE_MAINS:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", main.decode()])
        try:
            deadline = time.monotonic() + 10
            while main not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
                time.sleep(0.01)   # until the child has exec'd
            assert _runs_service(proc.pid), main
        finally:
            proc.kill()
            proc.wait()
    assert not _runs_service(os.getpid())


def test_a_burst_runs_the_load_faster_for_its_first_seconds_then_at_its_rate():
    from deltanode_bench.scale import Burst, timeline_rows
    burst = Burst.parse("3:10")
    assert (burst.due(5, 100), burst.due(10, 100), burst.due(20, 100)) == (1500, 3000, 4000)
    for bad in ("3x", "0.5:10", "3:0"):
        with pytest.raises(ValueError, match="--scale-burst"):
            Burst.parse(bad)
    assert timeline_rows([(0.5, 1.0), (1.0, 2.0), (6.0, 0.3)]) == [
        ["0", 2, "1.50", "1.99", "2.00"], ["5", 1, "0.30", "0.30", "0.30"]]


def test_the_neighbour_burst_and_peers_options_are_checked_before_anything_runs():
    a = parse_args(["--scale", "1000", "--burn", "0.6", "--scale-burst", "3:15", "--scale-repeat", "3", "--peers"])
    assert (a.burn, a.burst.factor, a.burst.seconds, a.scale_repeat, a.peers) == (0.6, 3.0, 15.0, 3, True)
    for bad in (["--burn", "2"], ["--scale-burst", "fast"], ["--scale-repeat", "0"], ["--peers", "--mq", "pulsar"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_each_scale_conf_is_a_variant_of_conf_lines_and_a_bad_one_is_refused():
    a = parse_args(["--scale", "10000", "--scale-conf", "", "--scale-conf", "datanode.warmup=false; log.level=DEBUG"])
    assert a.scale_confs == ((), ("datanode.warmup = false", "log.level = DEBUG"))
    assert parse_args(["--scale", "256"]).scale_confs == ((),)
    for bad in ("datanode.warmup", "=false"):
        with pytest.raises(SystemExit):
            parse_args(["--scale", "256", "--scale-conf", bad])


def test_the_load_s_first_cycles_that_read_messages_are_shown_beside_the_medians():
    from deltanode_bench.scale import _phases

    def line(clock: str, messages: int, cycle: float, cpu: float) -> str:
        return (f"2026-11-29 {clock},000 INFO deltanode.pipeline.cycle: cycle 7: 2 range(s) in 2 task(s), "
                f"{messages} messages, 1.0 MB: 50 rows, 0 deletes, 0 quarantined in 1 file(s); 1 commit(s) for "
                f"1 vchannel(s); "
                f"{cycle:.3f} s (plan 0.010, job 0.200, apply 0.010, commits 0.050; tasks 0.300 s, their CPU "
                f"{cpu:.3f} s, broker wait 0.100 s)")

    import time as _time
    t0 = _time.mktime(_time.strptime("2026-11-29 10:00:00", "%Y-%m-%d %H:%M:%S"))
    text = "\n".join([line("09:59:59", 100, 9.0, 9.0),       # before the load: not counted
                      line("10:00:01", 0, 0.1, 0.0),         # read no message: not a first pass
                      line("10:00:02", 100, 1.2, 0.6), line("10:00:03", 100, 0.9, 0.4), line("10:00:04", 200, 0.9, 0.5),
                      line("10:00:05", 100, 0.3, 0.1), line("10:00:06", 100, 0.3, 0.1)])
    f = _phases(text, t0, t0 + 60)
    assert f is not None and f.cycles == 6
    assert f.first_cycle == pytest.approx(1.0)
    assert f.first_cpu_ms_per_message == pytest.approx(1e3 * 1.5 / 400)
