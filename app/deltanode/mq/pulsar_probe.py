"""Why a Pulsar broker refuses this client, learned from one CONNECT sent by hand (runs on the driver).

The C++ client under ``pulsar-client`` does not say: a broker that refuses the client's token
answers its CONNECT with an AuthenticationError, which the client drops before closing the
connection and trying again until the operation times out ("Pulsar error: TimeOut"); an untrusted
certificate surfaces as "ConnectError". ``mq.pulsar`` asks ``refusal`` after such an error: it
opens one connection as the client does (TLS with the conf's trust settings, then CONNECT with
the token) and reports what the handshake or the broker said (docs/secured-services.md). The same
CONNECT tells whether the broker answers this client at all (``handshake``): the driver asks that
when a topic's request times out, to tell a broker away from a topic of its own that is slow.
"""

from __future__ import annotations

import socket
import ssl
import struct
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ..wire.varint import encode_varint, read_varint
from .types import BrokerError, BrokerRefused

Settings = dict[str, str]   # Pulsar's client settings of the conf (mq.pulsar.auth.*, mq.pulsar.tls.*)

# The Pulsar binary protocol, as far as a CONNECT and its answer go (PulsarApi.proto): a frame is
# [total size][command size][BaseCommand], sizes 4-byte big-endian; BaseCommand field 1 is its type.
_CONNECT, _ERROR = 2, 14   # BaseCommand.Type (CONNECTED is 3)
_PROTOCOL_VERSION = 21
_TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
_SERVER_ERRORS = {0: "UnknownError", 3: "AuthenticationError", 4: "AuthorizationError", 6: "ServiceNotReady"}


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return encode_varint(number << 3) + encode_varint(value)
    return encode_varint(number << 3 | 2) + encode_varint(len(value)) + value


def _fields(data: bytes) -> dict[int, int | bytes]:
    """The varint and length-delimited fields of a protobuf message (the last of each number)."""
    out: dict[int, int | bytes] = {}
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        if key & 7 == 0:
            out[key >> 3], i = read_varint(data, i)
        elif key & 7 == 2:
            size, i = read_varint(data, i)
            out[key >> 3], i = data[i:i + size], i + size
        else:
            break   # nothing this reads has other wire types
    return out


def _token(settings: Settings) -> bytes | None:
    """The token the client presents, when the plugin is the token one (``token:<jwt>``, ``file:<path>``
    or a bare token, as the client reads its parameters)."""
    if settings.get("auth.plugin", "").lower() not in ("token", _TOKEN_PLUGIN.lower()):
        return None
    params = settings.get("auth.params", "")
    if params.startswith("file:"):
        try:
            return Path(params.removeprefix("file://").removeprefix("file:")).read_bytes().strip()
        except OSError:
            return b""
    return params.removeprefix("token:").strip().encode()


@dataclass(frozen=True, kw_only=True)
class Handshake:
    """What one CONNECT sent by hand learned: whether the broker accepted this client
    (``connected``), and, when it did not, why when that can be told (``refusal``: a BrokerRefused
    when the broker or the TLS handshake refused it, a BrokerError when nothing accepts connections;
    None when no answer came in time)."""

    connected: bool
    refusal: BrokerError | None = None


def refusal(service_url: str, settings: Settings | None, timeout: float = 5.0) -> BrokerError | None:
    """Why this client cannot connect to the broker, one line naming it: BrokerRefused when the broker
    refuses its credentials or the client the broker's certificate, BrokerError when nothing answers
    (None: the broker accepts the connection, or the probe cannot tell).
    """
    return handshake(service_url, settings, timeout).refusal


def handshake(service_url: str, settings: Settings | None, timeout: float = 5.0) -> Handshake:
    """One connection and CONNECT to the broker as the client makes them, within ``timeout`` for
    each step: whether the broker accepted it, else why not (``Handshake``). A broker that is
    paused accepts the TCP connection (the kernel does) and answers nothing."""
    settings = settings or {}
    url = urllib.parse.urlsplit(service_url)
    host, _, port = url.netloc.split(",")[0].rpartition(":")
    tls = url.scheme == "pulsar+ssl"
    trust = settings.get("tls.trust.certs.file")
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except (OSError, ValueError) as e:
        return Handshake(connected=False, refusal=BrokerError(f"Pulsar broker {service_url} unreachable: {e}"))
    try:
        if tls:
            context = ssl.create_default_context(cafile=trust) if trust else ssl.create_default_context()
            if str(settings.get("tls.allow.insecure", "")).lower() == "true":
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            else:
                context.check_hostname = str(settings.get("tls.validate.hostname", "")).lower() == "true"
            try:
                sock = context.wrap_socket(sock, server_hostname=host.strip("[]"))
            except ssl.SSLCertVerificationError as e:
                trusted = f"the CA certificates of mq.pulsar.tls.trust.certs.file {trust}" if trust else \
                    "the system's CA certificates (mq.pulsar.tls.trust.certs.file is unset)"
                return Handshake(connected=False, refusal=BrokerRefused(
                    f"Pulsar broker {service_url}: TLS handshake refused, the broker's certificate is not trusted "
                    f"({e.verify_message}) by {trusted}"))
            except (ssl.SSLError, OSError) as e:
                return Handshake(connected=False,
                                 refusal=BrokerRefused(f"Pulsar broker {service_url}: TLS handshake failed: {e}"))
        token = _token(settings)
        connect = _field(1, b"deltanode-probe") + _field(4, _PROTOCOL_VERSION)
        if token is not None:
            connect += _field(5, b"token") + _field(3, token)
        command = _field(1, _CONNECT) + _field(2, connect)
        sock.sendall(struct.pack(">II", len(command) + 4, len(command)) + command)
        header = _recv(sock, 8)
        answer = _fields(_recv(sock, struct.unpack(">II", header)[1]))
    except (OSError, ValueError, IndexError, struct.error):
        return Handshake(connected=False)   # no answer to tell from: the client's own error stands
    finally:
        sock.close()
    if answer.get(1) != _ERROR:
        return Handshake(connected=True)   # CONNECTED (or a challenge): credentials and certificate are accepted
    return Handshake(connected=False, refusal=_refused(service_url, settings, token, answer))


def _refused(service_url: str, settings: Settings, token: bytes | None,
             answer: dict[int, int | bytes]) -> BrokerRefused:
    """The broker's ERROR ``answer`` to the CONNECT, one line naming what to fix."""
    error = next((_fields(v) for v in answer.values() if isinstance(v, bytes)), {})
    code, text = error.get(2), error.get(3)
    said = f"{_SERVER_ERRORS.get(code, f'error {code}') if isinstance(code, int) else 'error'} " \
           f"\"{text.decode(errors='replace') if isinstance(text, bytes) else ''}\""
    if token is None and not settings.get("auth.plugin"):
        return BrokerRefused(f"Pulsar broker {service_url} refused the connection: it requires authentication and "
                             f"none is configured (mq.pulsar.auth.plugin is unset; the broker said {said})")
    if token is not None:
        return BrokerRefused(f"Pulsar broker {service_url} refused the token of mq.pulsar.auth.params (the broker "
                             f"said {said})")
    return BrokerRefused(f"Pulsar broker {service_url} refused the credentials of mq.pulsar.auth.plugin "
                         f"{settings.get('auth.plugin')} (the broker said {said})")


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            raise OSError("connection closed")
        data += more
    return data
