"""DeltaNode on an etcd with TLS, client certificates and users (``secured_etcd.SecuredEtcd``): its
gRPC client and its fence log in and check the server; each bad credential is refused with an
error naming etcd and what was refused."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
import urllib.request

import pytest

from deltanode.config import env_name
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient, EtcdRefused
from deltanode.etcd.fence import OwnershipFence
from deltanode.standalone.services import free_port

from .milvus_client import MilvusClient
from .milvus_mirror import Mirror, mirror_a_sharded_collection
from .milvus_server import MilvusServer
from .secured_etcd import OWN_PREFIX, PASSWORD, SecuredEtcd
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
from .support import fresh_root, wait_until

MILVUS_ROOT = f"msec{os.getpid()}"   # the mirrored Milvus's etcd root and topic prefix, apart from the suite's


@pytest.fixture(scope="module")
def etcd(tmp_path_factory, tls_files):
    with SecuredEtcd(tmp_path_factory.mktemp("secured-etcd"), tls_files, milvus_prefix=f"{MILVUS_ROOT}/") as server:
        yield server


def test_a_logged_in_client_reads_writes_watches_and_keeps_a_lease_within_its_permissions(etcd):
    root = f"{OWN_PREFIX}client"
    with EtcdClient(etcd.url, security=etcd.security()) as client:
        seen: list[str] = []
        watch = client.watch_prefix(f"{root}/", lambda e: seen.append(e.key))
        lease = client.grant_lease(5)
        client.put(f"{root}/a", b"1", lease=lease)
        assert client.put_if_absent(f"{root}/b", b"2") and client.get(f"{root}/a")[0] == b"1"
        wait_until(lambda: sorted(seen) == [f"{root}/a", f"{root}/b"], 10)
        assert client.refresh_lease(lease) > 0
        watch.cancel()
        # Outside its prefixes the user is refused, and the error says so (not "unavailable").
        with pytest.raises(EtcdRefused, match=r"refused user 'deltanode': permission denied"):
            client.put("elsewhere/k", b"v")
        with pytest.raises(EtcdRefused, match="permission denied"):
            client.put("by-dev/meta/k", b"read only")


def test_a_wrong_password_an_untrusted_certificate_and_no_login_are_refused_by_name(etcd, tls_files):
    with pytest.raises(EtcdRefused, match=rf"etcd at {etcd.endpoint} refused the login of user 'deltanode': "
                                          r".*authentication failed, invalid user ID or password"):
        EtcdClient(etcd.url, security=etcd.security(password="wrong"))
    with pytest.raises(EtcdRefused, match=rf"etcd at {etcd.endpoint}: its TLS certificate is not trusted "
                                          rf"\(it does not chain to {tls_files.other_ca}"):
        EtcdClient(etcd.url, security=etcd.security(ca_cert=tls_files.other_ca))
    with pytest.raises(EtcdRefused, match=r"its TLS certificate does not name elsewhere.example"):
        EtcdClient(etcd.url, security=dataclasses.replace(etcd.security(), server_name="elsewhere.example"))
    with EtcdClient(etcd.url, security=dataclasses.replace(etcd.security(), server_name="localhost")):
        pass   # a name the certificate carries, whatever host is connected to
    # The client certificate alone acts as its CN (root here), as Milvus 2.3.5's etcd.ssl does.
    with EtcdClient(etcd.url, security=etcd.security(username=None)) as as_root:
        as_root.put("elsewhere/k", b"root may")


def test_the_fence_checks_ownership_over_tls_as_the_user_and_logs_in_again_after_etcd_restarts(etcd, tmp_path):
    root = f"{OWN_PREFIX}fence/meta"
    with EtcdClient(etcd.url, security=etcd.security()) as client:
        lease = client.grant_lease(30)
        client.put(keys.session_key(root, "datanode", 7), b"{}", lease=lease)
        fence = OwnershipFence(etcd.url, root, 7, timeout=2.0, security=etcd.security())
        assert fence.check(["v0"]) == {"v0": f"v0 is no longer assigned to DataNode 7 "
                                             f"({keys.channel_watch_key(root, 7, 'v0')} is gone)"}
        assert fence.reachable
        # etcd forgets every login when it restarts: both clients log in again on their own.
        etcd.stop()
        etcd.start()
        assert client.get(keys.session_key(root, "datanode", 7)) is not None
        fence._view = None   # read the whole prefix again, as after a deletion
        assert "v0" in fence.check(["v0"]) and fence.reachable, fence.reachability.down_since
        wrong = OwnershipFence(etcd.url, root, 7, timeout=2.0, security=etcd.security(password="wrong"))
        assert wrong.check(["v0"]) == {} and not wrong.reachable   # no answer: the commit relies on Delta alone
        assert "refused the login of user 'deltanode'" in wrong.reachability.error


def test_a_watch_keeps_delivering_after_etcd_restarts(etcd):
    root = f"{OWN_PREFIX}watch"
    with EtcdClient(etcd.url, security=etcd.security()) as client:
        seen: list[str] = []
        lock = threading.Lock()

        def note(event) -> None:
            with lock:
                seen.append(event.key)
        client.watch_prefix(f"{root}/", note)
        client.put(f"{root}/before", b"1")
        wait_until(lambda: f"{root}/before" in seen, 10)
        etcd.stop()
        etcd.start()
        with EtcdClient(etcd.url, security=etcd.security()) as other:
            other.put(f"{root}/after", b"2")
        wait_until(lambda: f"{root}/after" in seen, 30)


@pytest.mark.spark
def test_standalone_on_the_secured_etcd_and_s3_commits_every_row_once_without_showing_a_secret(etcd, s3, tmp_path):
    """``spark-submit.sh standalone`` as a user runs it beside a secured etcd, its tables on S3: the
    etcd password from a file, the S3 secret from the environment; the DataNode's session, channel
    watch, fence and the admin commands all log in. Neither secret shows in the logs, in Spark's UI or
    in its event log: executors get the S3 credentials inside their tasks (pickled with the storage
    layout), never as Spark properties, and never the etcd password (they never reach etcd). A wrong
    password then stops standalone at start, naming etcd and the refused login, committing nothing."""
    (tmp_path / "etcd-password").write_text(f"{PASSWORD}\n")
    ui_port, events = free_port(), tmp_path / "events"
    events.mkdir()
    root = fresh_root("secured")
    env = dict(_env(tmp_path, "kafka", free_port()), DELTANODE_EMBEDDED_ETCD="false",
               DELTANODE_ETCD_ROOT=f"{OWN_PREFIX}standalone-{os.urandom(3).hex()}/meta",
               DELTANODE_ETCD_AUTH_PASSWORD_FILE=str(tmp_path / "etcd-password"),
               **{env_name(k): v for k, v in etcd.conf().items()},
               DELTANODE_STORAGE_ROOT=root, DELTANODE_STORAGE_S3_ENDPOINT=s3.endpoint,
               DELTANODE_STORAGE_S3_REGION=s3.region, DELTANODE_STORAGE_S3_ACCESS_KEY_ID=s3.access_key_id,
               DELTANODE_STORAGE_S3_SECRET_ACCESS_KEY=s3.secret_access_key,
               DELTANODE_SPARK_UI_ENABLED="true", DELTANODE_SPARK_UI_PORT=str(ui_port),
               DELTANODE_SPARK_EVENTLOG_ENABLED="true", DELTANODE_SPARK_EVENTLOG_DIR=f"file://{events}",
               DELTANODE_SPARK_EVENTLOG_COMPRESS="false")   # plain JSON lines, to search
    secrets = (PASSWORD, s3.secret_access_key)
    shown = subprocess.run([str(ROOT / "spark-submit.sh"), "standalone", "--conf", "conf/standalone.conf",
                            "--print-conf"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert "etcd.auth.password = ****" in shown.stdout and "storage.s3.secret.access.key = ****" in shown.stdout
    assert not [s for s in secrets if s in shown.stdout], shown.stdout[-2000:]
    proc = start(env, tmp_path / "standalone.log")
    try:
        created = serve_a_collection(env, tmp_path, "secured", tmp_path / "standalone.log")
        # What Spark's UI shows of the application: its properties, system properties, jobs, stages.
        ui = f"http://127.0.0.1:{ui_port}/api/v1/applications"
        app = json.loads(urllib.request.urlopen(ui, timeout=10).read())[0]["id"]
        pages = "".join(urllib.request.urlopen(f"{ui}/{app}/{page}", timeout=10).read().decode()
                        for page in ("environment", "jobs", "stages", "executors"))
        assert "spark.master" in pages and not [s for s in secrets if s in pages]
    finally:
        assert stop(proc) == 0, (tmp_path / "standalone.log").read_text()[-3000:]
    proc = start(env, tmp_path / "standalone-2.log")
    try:
        rc, more = admin(env, "produce", "--collection", "secured", "--messages", "2", "--rows", "100",
                         "--deletes", "0")
        assert rc == 0, more
        wait_for_rows(env, "secured", 1200, 60, tmp_path / "standalone-2.log")
        storage = StorageLayout(root, s3)
        pks = read_table(storage, storage.insert_log(created["collection_id"]), include_deleted=True).column("pk")
        # Each admin produce numbers its keys from 1: every row once, none twice.
        assert sorted(pks.to_pylist()) == sorted([*range(1, 1001), *range(1, 201)])
    finally:
        assert stop(proc) == 0, (tmp_path / "standalone-2.log").read_text()[-3000:]
    logs = "".join((tmp_path / name).read_text() for name in ("standalone.log", "standalone-2.log"))
    event_logs = ["".join(f.read_text() for f in sorted(run.rglob("*")) if f.is_file()) for run in events.iterdir()]
    assert len(event_logs) == 2 and all("SparkListenerTaskEnd" in text for text in event_logs), os.listdir(events)
    assert not [s for s in secrets if s in logs + "".join(event_logs)]

    # A wrong password: standalone stops at start with one line naming etcd and the refused login,
    # and commits nothing (no new table version).
    (tmp_path / "etcd-password").write_text("not-the-password")
    commits = _commits(s3, root)
    refused = subprocess.run([str(ROOT / "spark-submit.sh"), "standalone", "--conf", "conf/standalone.conf"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1, said[-3000:]
    assert f"error: etcd at {etcd.endpoint} refused the login of user 'deltanode'" in said, said[-3000:]
    assert "Traceback" not in said and _commits(s3, root) == commits
    assert not leftovers(tmp_path), "embedded services outlived the refused start"


def _commits(s3, root: str) -> list[str]:
    """Every Delta commit file under ``root`` in the S3 fixture's bucket."""
    prefix = root.split("/", 3)[3]
    return sorted(o["Key"] for page in s3.boto3().get_paginator("list_objects_v2").paginate(
        Bucket="deltanode", Prefix=prefix) for o in page.get("Contents", []) if "/_delta_log/" in o["Key"])



@pytest.mark.spark
def test_a_real_milvus_on_the_secured_etcd_is_mirrored_by_a_user_that_may_only_read_its_meta(etcd, broker, tmp_path):
    """Milvus 2.3.5 on the etcd over TLS (its etcd.ssl: the client certificate, acting as root); the
    mirror logged in as ``deltanode``, which may write only its own root and read only Milvus's."""
    with MilvusServer(etcd.endpoint, broker.bootstrap_servers, tmp_path / "milvus", root_path=MILVUS_ROOT,
                      config=etcd.milvus_config()) as milvus, MilvusClient(milvus.uri, timeout=120) as mc:
        mirror = Mirror(etcd, milvus, tmp_path)
        mirror.env.update({env_name(k): v for k, v in etcd.conf().items()}, DELTANODE_ETCD_ENDPOINTS=etcd.url,
                          DELTANODE_ETCD_ROOT=f"{OWN_PREFIX}mirror/meta", DELTANODE_ETCD_AUTH_PASSWORD=PASSWORD)
        mirror_a_sharded_collection(mc, mirror, "secured")
    assert PASSWORD not in mirror.log.read_text()


@pytest.mark.parametrize("case", ["wrong password", "untrusted certificate"])
def test_an_admin_command_refused_by_etcd_says_so_in_one_line(etcd, tls_files, tmp_path, case):
    """What a user sees from the command line: exit 1 and one line naming etcd and what it refused."""
    (tmp_path / "pw").write_text("not-the-password" if case == "wrong password" else PASSWORD)
    env = dict(os.environ, DELTANODE_STORAGE_ROOT=str(tmp_path / "delta"),
               DELTANODE_ETCD_ROOT=f"{OWN_PREFIX}admin/meta", DELTANODE_ETCD_AUTH_PASSWORD_FILE=str(tmp_path / "pw"),
               **{env_name(k): v for k, v in etcd.conf().items()})
    if case == "untrusted certificate":
        env["DELTANODE_ETCD_SSL_TLS_CA_CERT"] = str(tls_files.other_ca)
    done = subprocess.run([str(ROOT / "spark-submit.sh"), "admin", "show-channels", "--conf", "conf/standalone.conf"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    said = done.stdout + done.stderr
    expected = ("refused the login of user 'deltanode'" if case == "wrong password"
                else f"its TLS certificate is not trusted (it does not chain to {tls_files.other_ca}")
    assert done.returncode == 1 and f"etcd at {etcd.endpoint}" in said and expected in said, said[-2000:]
    assert "Traceback" not in said and len(said.strip().splitlines()) == 1, said[-2000:]
