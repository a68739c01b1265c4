"""Pulsar clients made from the conf's authentication and TLS settings, and what a client's error
means: a broker that refuses the client, or one that failed the request (``explain``).

Both sides make their clients here (the executor's range reader, the driver's watermarks and
senders); only the driver explains errors, which may probe the broker (``pulsar_probe``).
"""

from __future__ import annotations

from collections.abc import Callable

import pulsar

from .pulsar_probe import refusal
from .types import BrokerError, BrokerRefused

__all__ = ["Settings", "client_options", "explain", "new_client"]

Settings = dict[str, str]   # auth.*, tls.*, receiver.queue.size (config keys mq.pulsar.*, prefix removed)


def client_options(settings: Settings | None) -> dict:
    """``pulsar.Client`` keyword arguments for the conf's authentication and TLS settings."""
    settings = settings or {}
    options: dict = {}
    plugin = settings.get("auth.plugin")
    if plugin:   # an unknown plugin is logged by the client, and the broker then refuses the connection
        options["authentication"] = pulsar.Authentication(plugin, settings.get("auth.params", ""))
    if settings.get("tls.trust.certs.file"):
        options["tls_trust_certs_file_path"] = settings["tls.trust.certs.file"]
    for key, arg in (("tls.allow.insecure", "tls_allow_insecure_connection"),
                     ("tls.validate.hostname", "tls_validate_hostname")):
        if key in settings:
            options[arg] = str(settings[key]).lower() == "true"
    return options


def new_client(service_url: str, timeout_seconds: int = 10, settings: Settings | None = None) -> pulsar.Client:
    """A client whose own log (warnings and errors) is appended to this process's stderr.

    The client logs from its C++ threads. Given a Python logger, it calls into the interpreter
    for every line, and a process that exits with a client it had (closed or not) may abort at
    interpreter teardown ("terminate called without an active exception", SIGABRT;
    docs/pulsar.md). The native file logger never calls Python; it opens the file in append
    mode, so stderr is neither truncated nor mixed into stdout, where ``admin`` prints its JSON.
    """
    return pulsar.Client(service_url, operation_timeout_seconds=timeout_seconds,
                         logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, "/dev/stderr"), **client_options(settings))


def explain(what: str, e: pulsar.PulsarException, service_url: str, settings: Settings | None,
            probe: Callable[[], BrokerError | None] | None = None) -> BrokerError:
    """``what`` failed with the client's error ``e``: a BrokerRefused when the broker refuses the client
    (a token it does not accept reaches the client as a timeout, an untrusted certificate as a connect
    error: ``refusal``, or ``probe`` when given), else a BrokerError with the client's error."""
    found = None
    if isinstance(e, pulsar.Timeout | pulsar.ConnectError):
        found = probe() if probe is not None else refusal(service_url, settings, 5.0)
    if isinstance(found, BrokerRefused):
        return BrokerRefused(f"{what}: {found}")
    return BrokerError(f"{what}: {e}")
