"""Pulsar clients made from the conf's authentication and TLS settings, and what a client's error
means: a broker that refuses the client, or one that failed the request (``explain``).

Both sides make their clients here (the executor's range reader, the driver's watermarks and
senders); only the driver explains errors, which may probe the broker (``pulsar_probe``).
"""

from __future__ import annotations

from collections.abc import Callable

import pulsar

from .pulsar_probe import refusal
from .types import BrokerError, BrokerRefused, BrokerUnreachable

__all__ = ["DISCONNECTED", "LOADING", "UNANSWERED", "Settings", "client_options", "explain", "new_client",
           "unanswered"]

# The client's errors while it has no connection to the broker (down, starting again, paused, cut off);
# Timeout also when one topic does not answer (its ledger's bookies are away, say).
DISCONNECTED = (pulsar.Timeout, pulsar.ConnectError, pulsar.NotConnected)
# What a broker answers while it is starting again and loads its topics (BrokerMetadataError for its first
# seconds: docs/pulsar.md); and also, from a broker that answers, for a lookup it fails for good (a
# namespace's policies it does not find). The driver takes them as "not answering yet" only shortly
# after a connection-level error (``mq.pulsar.Watermarks``).
LOADING = (pulsar.BrokerMetadataError, pulsar.LookupError)
# Those: nothing was refused or lost, and asking again later succeeds (``BrokerUnreachable``).
UNANSWERED = (*DISCONNECTED, pulsar.ServiceUnitNotReady, pulsar.TooManyLookupRequestException, *LOADING)

# auth.*, tls.*, receiver.queue.size, listener.name (config keys mq.pulsar.*, prefix removed)
Settings = dict[str, str]


def client_options(settings: Settings | None) -> dict:
    """``pulsar.Client`` keyword arguments for the conf's authentication, TLS and listener settings."""
    settings = settings or {}
    options: dict = {}
    if settings.get("listener.name"):   # lookups answer with that advertised listener's address
        options["listener_name"] = settings["listener.name"]
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
    error: ``refusal``, or ``probe`` when given), else a BrokerUnreachable when the broker did not
    answer (``UNANSWERED``), else a BrokerError with the client's error."""
    found = None
    if isinstance(e, pulsar.Timeout | pulsar.ConnectError):
        found = probe() if probe is not None else refusal(service_url, settings, 5.0)
    if isinstance(found, BrokerRefused):
        return BrokerRefused(f"{what}: {found}")
    return unanswered(what, e)


def unanswered(what: str, e: pulsar.PulsarException) -> BrokerError:
    """``what`` failed with ``e``, where no refusal is looked for (the executor's reads): a
    BrokerUnreachable when the broker did not answer, else a BrokerError."""
    return BrokerUnreachable(f"{what}: {e}") if isinstance(e, UNANSWERED) else BrokerError(f"{what}: {e}")
