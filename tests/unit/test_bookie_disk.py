"""The embedded Pulsar's start names a full disk at once (standalone/pulsar_server.py): pure logic on its log."""

from deltanode.standalone.pulsar_server import bookie_out_of_space

# BookKeeper's DiskChecker lines, as the embedded broker logged them on a disk 99.25% full.
FULL = ("22:40:47.780 ERROR [main] o.a.b.u.DiskChecker - Space left on device /data/bookkeeper/current : "
        "2018668544, Used space fraction: 0.99253875 > threshold 0.99.")
WARN = ("22:40:47.780 WARN  [main] o.a.b.u.DiskChecker - Space left on device /data/bookkeeper/current : "
        "5018668544, Used space fraction: 0.985 > WarnThreshold 0.98.")


def test_a_bookie_past_its_threshold_is_named(tmp_path):
    log = tmp_path / "pulsar-broker.log"
    log.write_text(f"22:40:47.739 WARN  [main] o.a.b.n.DNS - Unable to determine hostname\n{FULL}\n")
    assert bookie_out_of_space(log) == ("Space left on device /data/bookkeeper/current : 2018668544, "
                                        "Used space fraction: 0.99253875 > threshold 0.99.")


def test_a_warning_or_no_log_is_not_a_full_disk(tmp_path):
    log = tmp_path / "pulsar-broker.log"
    log.write_text(WARN + "\n")
    assert bookie_out_of_space(log) is None
    assert bookie_out_of_space(tmp_path / "missing.log") is None
