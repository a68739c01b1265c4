"""DeltaNode on an Apache Pulsar secured as production Pulsars are: token authentication (HS256
JWTs) on every port and TLS on the one DeltaNode uses (docs/secured-services.md).

One secured broker for the module (``EmbeddedApachePulsar`` with a ``PulsarSecurity``); each
standalone run uses it as an external broker (``embedded.broker = false``) over
``pulsar+ssl://``, with its own etcd, Delta tables and pchannel prefix.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.mq.broker import Broker, BrokerRefused
from deltanode.standalone.pulsar_server import EmbeddedApachePulsar, PulsarSecurity, make_token
from deltanode.standalone.services import free_port

from .milvus_client import MilvusClient
from .milvus_mirror import Mirror, mirror_a_sharded_collection
from .milvus_server import MilvusServer
from .standalone_run import (
    ROOT,
    _env,
    admin,
    leftovers,
    serve_a_collection,
    start,
    stop,
    wait_for_rows,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def secured(tmp_path_factory, tls_files):
    """The secured broker and the secret key its tokens are signed with."""
    key = os.urandom(32)
    security = PulsarSecurity(secret_key=key, superuser_token=make_token(key, "admin"), tls_cert=tls_files.server_cert,
                              tls_key=tls_files.server_key, tls_ca=tls_files.ca)
    with EmbeddedApachePulsar(tmp_path_factory.mktemp("secured-pulsar"), security=security) as server:
        yield server, key


def secured_env(tmp_path: Path, server: EmbeddedApachePulsar, ca: Path, token: str | None) -> dict[str, str]:
    """A standalone run of its own on the secured broker's TLS port; ``token`` None: no auth plugin."""
    env = dict(_env(tmp_path, "pulsar", free_port()), DELTANODE_EMBEDDED_BROKER="false",
               DELTANODE_MQ_PULSAR_SERVICE_URL=server.tls_service_url,
               DELTANODE_MQ_PCHANNEL_PREFIX=f"secured-{tmp_path.name}-rootcoord-dml",
               DELTANODE_MQ_PULSAR_TLS_TRUST_CERTS_FILE=str(ca), DELTANODE_MQ_PULSAR_TLS_VALIDATE_HOSTNAME="true")
    if token is not None:
        env.update(DELTANODE_MQ_PULSAR_AUTH_PLUGIN="token", DELTANODE_MQ_PULSAR_AUTH_PARAMS=f"token:{token}")
    return env


def test_standalone_on_a_token_and_tls_pulsar_commits_every_row_once_across_a_restart(tmp_path, secured, tls_files):
    server, key = secured
    token = make_token(key, "deltanode")
    env = secured_env(tmp_path, server, tls_files.ca, token)
    storage = StorageLayout(str(tmp_path / "delta"))
    proc = start(env, tmp_path / "standalone.log")
    try:
        created = serve_a_collection(env, tmp_path, "vault", tmp_path / "standalone.log")
        rc, health = admin(env, "health")
        assert rc == 0 and health["broker"] == "up" and health["healthy"] is True, health
    finally:
        rc = stop(proc)
    assert rc == 0, (tmp_path / "standalone.log").read_text()[-3000:]
    table = storage.insert_log(created["collection_id"])
    assert sorted(read_table(storage, table, include_deleted=True).column("pk").to_pylist()) == list(range(1, 1001))

    proc = start(env, tmp_path / "standalone-2.log")
    try:
        rc, more = admin(env, "produce", "--collection", "vault", "--messages", "5", "--rows", "100", "--deletes", "0")
        assert rc == 0, more
        wait_for_rows(env, "vault", 1500, 120, tmp_path / "standalone-2.log")
    finally:
        rc = stop(proc)
    assert rc == 0, (tmp_path / "standalone-2.log").read_text()[-3000:]
    assert not leftovers(tmp_path), "embedded services outlived standalone"
    # Each admin produce numbers its keys from 1: every row once, none lost over the restart.
    pks = read_table(storage, table, include_deleted=True).column("pk").to_pylist()
    assert sorted(pks) == sorted([*range(1, 1001), *range(1, 501)])

    # The token is a secret: neither the logs nor --print-conf show it.
    for log in ("standalone.log", "standalone-2.log"):
        assert token not in (tmp_path / log).read_text()
    shown = subprocess.run([str(ROOT / "spark-submit.sh"), "standalone", "--conf", "conf/standalone.conf",
                            "--print-conf"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "mq.pulsar.auth.params" in shown.stdout, shown.stderr[-2000:]
    assert token not in shown.stdout + shown.stderr and key.hex() not in shown.stdout


def _bad(kind: str, key: bytes, tls_files) -> tuple[str | None, Path, str]:
    """The token and trusted CA of a bad ``kind`` of credentials, and what the error must say."""
    match kind:
        case "missing token":
            return None, tls_files.ca, "refused the connection: it requires authentication and none is configured"
        case "wrong token":   # a well-formed token of another key
            return make_token(os.urandom(32), "deltanode"), tls_files.ca, "refused the token of mq.pulsar.auth.params"
        case _:
            return (make_token(key, "deltanode"), tls_files.other_ca,
                    f"TLS handshake refused, the broker's certificate is not trusted (unable to get local issuer "
                    f"certificate) by the CA certificates of mq.pulsar.tls.trust.certs.file {tls_files.other_ca}")


@pytest.mark.parametrize("kind", ["missing token", "wrong token", "untrusted certificate"])
def test_refused_credentials_stop_standalone_at_start_with_one_clear_line(tmp_path, secured, tls_files, kind):
    """Standalone exits 1 at start, before Spark, with one line naming Pulsar, the URL and what was
    refused: no retries in a loop, no traceback, no Delta table; ``admin health`` says the same."""
    server, key = secured
    token, ca, said = _bad(kind, key, tls_files)
    env = secured_env(tmp_path, server, ca, token)
    began = time.monotonic()
    ran = subprocess.run([str(ROOT / "spark-submit.sh"), "standalone", "--conf", "conf/standalone.conf"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - began
    out = ran.stdout + ran.stderr
    errors = [line for line in out.splitlines() if "error:" in line]
    print(f"{kind}: exit {ran.returncode} after {took:.1f} s: {errors}")
    expected = f"spark-submit.sh standalone: error: Pulsar broker {server.tls_service_url}"
    assert ran.returncode == 1 and len(errors) == 1 and errors[0].startswith(expected), out[-3000:]
    assert said in errors[0], errors[0]
    assert "Traceback" not in out and "starting Spark" not in out, out[-3000:]
    assert took < 60, f"took {took:.0f} s"
    assert not (tmp_path / "delta").exists() or not list((tmp_path / "delta").rglob("_delta_log")), \
        "a refused start committed to Delta"
    assert not leftovers(tmp_path), "embedded services outlived the refused start"
    rc, health = admin(env, "health")
    assert rc == 1 and said in health["broker_error"], health


def test_a_token_refused_while_running_is_named_by_the_driver_s_reads_and_sends(secured, tls_files):
    """Past the start (a token expired or revoked while DeltaNode runs), the client still reports a
    refused token as a timeout: the watermarks and sends the driver makes name the refusal too."""
    server, _ = secured
    bad = Broker("pulsar", server.tls_service_url, client=(
        ("auth.plugin", "token"), ("auth.params", f"token:{make_token(os.urandom(32), 'deltanode')}"),
        ("tls.trust.certs.file", str(tls_files.ca))))
    refused = re.escape(f"Pulsar broker {server.tls_service_url} refused the token of mq.pulsar.auth.params")
    with pytest.raises(BrokerRefused, match=refused) as sent:
        bad.send_all([("secured-direct-rootcoord-dml_0", b"x")])
    assert "could not send to ['secured-direct-rootcoord-dml_0']" in str(sent.value)
    sender = bad.sender()   # the TimeTicks' and admin produce's
    try:
        with pytest.raises(BrokerRefused, match=refused):
            sender.produce("secured-direct-rootcoord-dml_0", b"x")
    finally:
        sender.close()
    watermarks = bad.watermarks()
    try:
        with pytest.raises(BrokerRefused, match=refused) as read:
            watermarks.high("secured-direct-rootcoord-dml_0")
        assert "cannot read the last message id of secured-direct-rootcoord-dml_0" in str(read.value)
    finally:
        watermarks.close()


def test_a_real_milvus_on_the_token_pulsar_is_mirrored_over_tls(secured, tls_files, etcd_server, tmp_path):
    """Milvus 2.3.5 produces with a token of its own (its pulsar.authPlugin and authParams) on the
    plain port; the mirror follows its pchannels over TLS with DeltaNode's token."""
    server, key = secured
    root = f"mpulsar{os.getpid()}"
    milvus_token = make_token(key, "milvus")
    with MilvusServer(etcd_server.endpoint, server.service_url, tmp_path / "milvus", root_path=root, mq="pulsar",
                      pulsar_web_port=server.web_port,
                      config={"pulsar.authPlugin": "token", "pulsar.authParams": f"token:{milvus_token}"}) as milvus, \
            MilvusClient(milvus.uri, timeout=120) as mc:
        mirror = Mirror(etcd_server, milvus, tmp_path)
        deltanode_token = make_token(key, "deltanode")
        mirror.env.update(DELTANODE_MQ_PULSAR_SERVICE_URL=server.tls_service_url,
                          DELTANODE_MQ_PULSAR_TLS_TRUST_CERTS_FILE=str(tls_files.ca),
                          DELTANODE_MQ_PULSAR_TLS_VALIDATE_HOSTNAME="true", DELTANODE_MQ_PULSAR_AUTH_PLUGIN="token",
                          DELTANODE_MQ_PULSAR_AUTH_PARAMS=f"token:{deltanode_token}")
        mirror_a_sharded_collection(mc, mirror, "vault")
    assert deltanode_token not in mirror.log.read_text()
