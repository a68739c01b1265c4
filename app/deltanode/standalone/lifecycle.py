"""Start and stop the pieces of a standalone run as one group.

    with ServiceGroup(settings.embedded) as group:   # embedded etcd / broker as configured
        group.add("datanode", datanode.stop)   # anything else, stopped before the services
        while not group.wait(interval):
            group.check()                      # restarts a service that died
            log.info("progress ...")

``start()`` installs SIGINT/SIGTERM handlers (main thread only); ``wait()`` turns a signal into
a stop request within half a second (the handler itself only records it: a handler that
logged or set an Event could deadlock on a lock the interrupted main thread held);
``stop()`` stops everything in reverse order of start, restores the handlers and is safe to
call twice. A port that is already taken raises PortInUseError at once, naming the port and
the conf key that chose it (``EmbeddedPort``).

A standalone run never stops itself: an embedded process that exits is started again by
``check()`` on the same ports and data directory, with a backoff (the DataNode rides out the
gap: it keeps committing while etcd is away). Both embedded brokers keep their topics on disk;
``check()`` returns what it restarted, and the caller makes sure the topics are there (a broker
whose data was removed has lost them: the vchannels whose positions it lost fail alone).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from deltanode.config.sections.embedded import EmbeddedPort, EmbeddedSettings
from deltanode.standalone.kafka_server import EmbeddedKafka
from deltanode.standalone.pulsar_server import EmbeddedApachePulsar
from deltanode.standalone.services import EmbeddedEtcd, PortInUseError, ServiceError

log = logging.getLogger("deltanode.standalone")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# What signal.signal() returns and takes: a function, SIG_DFL / SIG_IGN, or None (not set from Python).
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
SIGNAL_POLL = 0.5   # seconds: how soon wait() notices a signal
RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)   # seconds before restarting a service again


class ServiceGroup:
    """Embedded etcd and broker (when configured) plus registered components."""

    def __init__(self, settings: EmbeddedSettings, *, handle_signals: bool = True) -> None:
        """``settings``: ``Settings.embedded``."""
        self.settings = settings
        self.handle_signals = handle_signals
        self.stop_event = threading.Event()
        self.stop_reason: str | None = None
        self.etcd: EmbeddedEtcd | None = None
        self.broker: EmbeddedKafka | EmbeddedApachePulsar | None = None
        self._stack: list[tuple[str, Callable[[], None]]] = []
        self._old_handlers: dict[int, _Handler] = {}
        self._signals: list[int] = []   # appended by the handler, read by wait()
        self._lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._restarts: dict[str, int] = {}            # service name -> restarts so far
        self._restart_at: dict[str, float] = {}        # service name -> earliest next restart

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir

    # -- start / stop
    def start(self) -> "ServiceGroup":
        if self._started:
            return self
        self._started = True
        if self.handle_signals:
            self._install_signals()
        try:
            embedded = self.settings
            if embedded.etcd:
                etcd = EmbeddedEtcd(self.data_dir / "etcd", client_port=embedded.etcd_port.port)
                self._start_process(etcd, embedded.etcd_port)
                self.etcd = etcd
            if embedded.broker:
                port = embedded.broker_port.port
                broker: EmbeddedKafka | EmbeddedApachePulsar
                heap = f"{max(embedded.broker_heap >> 20, 64)}m"
                if embedded.broker_kind == "pulsar":
                    broker = EmbeddedApachePulsar(self.data_dir / "pulsar", port, heap=heap)
                else:
                    broker = EmbeddedKafka(self.data_dir / "kafka", port, heap=heap)
                self._start_process(broker, embedded.broker_port)
                self.broker = broker
        except BaseException:
            self.stop()
            raise
        return self

    def _start_process(self, proc, port: EmbeddedPort) -> None:
        try:
            proc.start()
        except PortInUseError as e:
            raise PortInUseError(f"{e} ({port.origin})") from None
        except ServiceError:
            proc.stop()
            raise
        self._stack.append((proc.name, proc.stop))
        log.info("%s started on 127.0.0.1:%s (log: %s)", proc.name,
                 getattr(proc, "client_port", None) or getattr(proc, "port", None), proc.log_path)

    def add(self, name: str, stop: Callable[[], None]) -> None:
        """Register a started component; ``stop`` runs before those registered earlier."""
        with self._lock:
            if self._stopped:
                raise ServiceError(f"cannot add {name}: the service group is stopped")
            self._stack.append((name, stop))

    def request_stop(self, reason: str = "stop requested") -> None:
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a stop request (or a signal); True once stopping."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._signals and not self.stop_event.is_set():
                name = signal.Signals(self._signals[0]).name
                log.info("%s received: stopping", name)
                self.request_stop(name)
            left = SIGNAL_POLL if deadline is None else min(SIGNAL_POLL, deadline - time.monotonic())
            if self.stop_event.wait(max(0.0, left)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def check(self) -> list[str]:
        """Start again an embedded process that exited on its own; returns the names restarted."""
        restarted = []
        for proc in (self.etcd, self.broker):
            if proc is None or proc.proc is None or proc.proc.poll() is None or self._stopped:
                continue
            now = time.monotonic()
            if now < self._restart_at.get(proc.name, 0.0):
                continue
            count = self._restarts[proc.name] = self._restarts.get(proc.name, 0) + 1
            self._restart_at[proc.name] = now + RESTART_BACKOFF[min(count, len(RESTART_BACKOFF)) - 1]
            log.error("embedded %s exited unexpectedly with code %s; starting it again (restart %d)",
                      proc.name, proc.proc.returncode, count)
            try:
                proc.start()
            except ServiceError as e:
                log.error("restarting %s failed: %s; trying again in %.0f s", proc.name, e,
                          self._restart_at[proc.name] - now)
                continue
            restarted.append(proc.name)
        return restarted

    def stop(self) -> None:
        """Stop everything in reverse order; errors are logged, not raised. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            stack, self._stack = self._stack, []
        self.request_stop(self.stop_reason or "stopping")
        for name, stop in reversed(stack):
            log.info("stopping %s", name)
            try:
                stop()
            except Exception:  # keep stopping the rest
                log.exception("error while stopping %s", name)
        self._restore_signals()

    def __enter__(self) -> "ServiceGroup":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- signals
    def _on_signal(self, signum, frame) -> None:
        # No logging, no Event here (see the module doc). A second signal restores the default
        # handlers: a third one then ends the process (Ctrl-C raises KeyboardInterrupt).
        self._signals.append(signum)
        if len(self._signals) >= 2:
            self._restore_signals()

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.debug("not in the main thread: no signal handlers installed")
            return
        for sig in _SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _restore_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        while self._old_handlers:
            sig, old = self._old_handlers.popitem()
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
