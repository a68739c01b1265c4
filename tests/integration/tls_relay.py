"""A TLS front for a plain-HTTP server on loopback: the tests' S3 server (moto) served over ``https://``
with the test CA's server certificate, so a client's trust settings (``storage.s3.ca.file``) are
exercised against the same bucket the plain endpoint serves."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

from deltanode.standalone.services import free_port


class TlsRelay:
    """Accepts TLS on ``127.0.0.1:port`` with ``cert``/``key`` and forwards the plain bytes to ``upstream``."""

    def __init__(self, upstream: str, cert: Path, key: Path) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.port = free_port()
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(str(cert), str(key))
        self._listener: socket.socket | None = None

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> TlsRelay:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._listener is not None:
            self._listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return   # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            secured = self._context.wrap_socket(client, server_side=True)
            server = socket.create_connection(self.upstream, timeout=5)
            server.settimeout(None)
        except (OSError, ssl.SSLError):
            client.close()   # a client that refused the certificate: its handshake failed
            return
        threading.Thread(target=_pump, args=(server, secured), daemon=True).start()
        _pump(secured, server)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
