"""Certificates for the secured-service tests, made with the ``openssl`` command line.

One test CA signs a server certificate (for ``127.0.0.1`` and ``localhost``) and a client
certificate; a second CA signs nothing the servers present, so a client that trusts only it
refuses them (the "untrusted certificate" cases). Keys are RSA 2048, PKCS#8 PEM without a
passphrase: the form every server here (etcd, Kafka's PEM key store, Pulsar) and every client
(gRPC, librdkafka, the Pulsar C++ client, Python's ssl) reads.

    files = make_tls_files(tmp_path / "tls", client_cn="root")
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsFiles", "make_tls_files"]

DAYS = "3"


@dataclass(frozen=True, kw_only=True)
class TlsFiles:
    ca: Path            # the test CA's certificate: what clients and servers trust
    server_cert: Path   # signed by ``ca`` for IP 127.0.0.1 and DNS localhost (CN localhost)
    server_key: Path
    client_cert: Path   # signed by ``ca``; its CN is the user etcd's --client-cert-auth sees
    client_key: Path
    other_ca: Path      # a CA that signed nothing the servers present


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed (exit {done.returncode}): {done.stderr[-1000:]}")


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key.name, "-out", cert.name,
             "-days", DAYS, "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return cert, key


def _signed(directory: Path, name: str, cn: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (directory / f"{name}.pem", directory / f"{name}-key.pem", directory / f"{name}.csr",
                           directory / f"{name}.ext")
    ext.write_text(extensions)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key.name, "-out", csr.name, "-subj", f"/CN={cn}",
             cwd=directory)
    _openssl("x509", "-req", "-in", csr.name, "-CA", ca[0].name, "-CAkey", ca[1].name, "-CAcreateserial",
             "-out", cert.name, "-days", DAYS, "-extfile", ext.name, cwd=directory)
    return cert, key


def make_tls_files(directory: str | Path, *, client_cn: str = "deltanode") -> TlsFiles:
    """A fresh CA, server and client certificates, and an unrelated CA, under ``directory``."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the secured-service tests need the openssl command (Debian package openssl)")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "test-ca")
    server = _signed(directory, "server", "localhost", ca,
                     "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
                     "keyUsage=critical,digitalSignature,keyEncipherment\n")
    client = _signed(directory, "client", client_cn, ca,
                     "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n")
    other, _ = _ca(directory, "other-ca")
    return TlsFiles(ca=ca[0], server_cert=server[0], server_key=server[1], client_cert=client[0],
                    client_key=client[1], other_ca=other)
