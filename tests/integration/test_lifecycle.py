"""ServiceGroup with real processes: embedded etcd and Apache Kafka, signals, reverse-order stop."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from deltanode.config import Conf
from deltanode.config.sections.embedded import EmbeddedSettings
from deltanode.config.settings import embedded_settings
from deltanode.standalone.lifecycle import ServiceGroup
from deltanode.standalone.services import PortInUseError, free_port


def _embedded(tmp_path, etcd_port, broker_port, **extra) -> EmbeddedSettings:
    conf = Conf.from_dict({"storage.root": "delta", "embedded.etcd": True,
                           "embedded.broker": True, "embedded.data.dir": "var",
                           "etcd.endpoints": f"127.0.0.1:{etcd_port}",
                           "mq.kafka.bootstrap.servers": f"127.0.0.1:{broker_port}", **extra},
                          base_dir=tmp_path)
    return embedded_settings(conf)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_start_signal_and_stop_in_reverse_order(tmp_path):
    etcd_port, broker_port = free_port(), free_port()
    order = []
    before = signal.getsignal(signal.SIGTERM)
    group = ServiceGroup(_embedded(tmp_path, etcd_port, broker_port))
    with group:
        assert _listening(etcd_port) and _listening(broker_port)
        assert (tmp_path / "var" / "etcd" / "etcd.log").exists()
        assert (tmp_path / "var" / "kafka" / "kafka.log").exists()
        group.check()
        etcd_proc, broker_proc = group.etcd.proc, group.broker.proc
        group.add("first", lambda: order.append(("first", etcd_proc.poll(), broker_proc.poll())))
        group.add("second", lambda: order.append(("second", None, None)))
        assert signal.getsignal(signal.SIGTERM) == group._on_signal
        os.kill(os.getpid(), signal.SIGTERM)
        assert group.wait(5) and group.stop_reason == "SIGTERM"
    # components first (newest first), while etcd and the broker were still running
    assert order == [("second", None, None), ("first", None, None)]
    assert etcd_proc.poll() is not None and broker_proc.poll() is not None
    assert not _listening(etcd_port) and not _listening(broker_port)
    assert signal.getsignal(signal.SIGTERM) == before
    group.stop()  # idempotent


def test_port_in_use_fails_fast_and_cleans_up(tmp_path):
    etcd_port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        group = ServiceGroup(_embedded(tmp_path, etcd_port, port), handle_signals=False)
        t = time.monotonic()
        with pytest.raises(PortInUseError) as e:
            group.start()
        assert time.monotonic() - t < 10
    msg = str(e.value)
    assert f"127.0.0.1:{port} is already in use" in msg and "mq.kafka.bootstrap.servers" in msg
    assert group.etcd is None or group.etcd.proc.poll() is not None
    assert not _listening(etcd_port)  # etcd, started first, was stopped again


def test_nothing_embedded(tmp_path):
    conf = Conf.from_dict({"storage.root": "delta"}, base_dir=tmp_path)
    with ServiceGroup(embedded_settings(conf), handle_signals=False) as group:
        assert group.etcd is None and group.broker is None
        group.request_stop("test")
        assert group.stopping


def test_an_embedded_service_that_dies_is_started_again_on_its_data(tmp_path):
    """Standalone never stops itself: a killed etcd comes back on the same port and data directory."""
    from deltanode.etcd.client import EtcdClient

    etcd_port, broker_port = free_port(), free_port()
    with ServiceGroup(_embedded(tmp_path, etcd_port, broker_port), handle_signals=False) as group:
        with EtcdClient(f"127.0.0.1:{etcd_port}") as client:
            client.put("kept", "before the kill")
        killed = group.etcd.proc
        killed.kill()
        killed.wait(10)
        assert group.check() == ["etcd"] and group.etcd.proc is not killed
        assert group.check() == []   # running again: nothing to do
        with EtcdClient(f"127.0.0.1:{etcd_port}") as client:
            assert client.get("kept")[0] == b"before the kill"
        group.etcd.proc.kill()      # again: restarted again, after a backoff of at most 2 s
        group.etcd.proc.wait(10)
        deadline = time.monotonic() + 5
        while group.check() != ["etcd"]:
            assert time.monotonic() < deadline, "etcd was not started a second time"
            time.sleep(0.2)
        assert _listening(etcd_port)
