"""The Spark options that reach a storage root on S3, without a JVM: S3A's settings from the conf's
``storage.s3.*`` keys, the credentials kept out of them, and the JVM trust store made of
``storage.s3.ca.file`` (keytool, as the sessions use it)."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from deltanode.config import Conf
from deltanode.config.jars import component_jars
from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import StoreOptions
from deltanode.lake import s3a, spark
from deltanode.lake.sql_command import session_options

S3A_JARS = [str(p) for p in component_jars("s3a")]
SECRET = "the-secret-access-key"


def s3_conf(tmp_path: Path, **more) -> Conf:
    return Conf.from_dict({"storage.root": "s3://bucket/lake", "storage.s3.endpoint": "http://127.0.0.1:9000",
                           "storage.s3.region": "eu-west-3", "storage.s3.access.key.id": "AKID",
                           "storage.s3.secret.access.key": SECRET, "etcd.endpoints": "127.0.0.1:2379", **more},
                          base_dir=tmp_path)


def test_an_endpoint_is_reached_path_style_and_over_http_only_when_it_says_http():
    options = s3a.s3a_options(StoreOptions(endpoint="http://127.0.0.1:9000", region="eu-west-3"))
    assert options == {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
                       "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
                       "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
                       "spark.hadoop.fs.s3a.path.style.access": "true",
                       "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                       "spark.hadoop.fs.s3a.endpoint.region": "eu-west-3"}
    bare = s3a.s3a_options(StoreOptions(endpoint="minio.internal:9000"))   # no scheme: HTTPS, as pyarrow reads it
    assert bare["spark.hadoop.fs.s3a.endpoint"] == "https://minio.internal:9000"
    assert bare["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    # AWS itself: S3A's own endpoint and region lookup, virtual-host addressing.
    assert set(s3a.s3a_options(StoreOptions())) == {"spark.hadoop.fs.s3.impl",
                                                    "spark.hadoop.fs.AbstractFileSystem.s3.impl"}


def test_the_credentials_are_hadoop_keys_and_never_spark_options(tmp_path):
    assert s3a.credentials(StoreOptions(access_key_id="AKID", secret_access_key=SECRET, session_token="tok")) == {
        "fs.s3a.access.key": "AKID", "fs.s3a.secret.key": SECRET, "fs.s3a.session.token": "tok"}
    assert s3a.credentials(StoreOptions()) == {}          # S3A's chain: the environment, the instance's role
    conf = s3_conf(tmp_path)
    options = session_options(conf, argparse.Namespace(command="sql"), str(tmp_path))
    builder = spark.configure(SparkSession.builder, conf)
    for given in (options, builder._options):
        assert given["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
        assert given["spark.jars"].split(",")[-len(S3A_JARS):] == S3A_JARS
        assert [k for k, v in given.items() if SECRET in str(v) or "AKID" in str(v)] == []


def test_a_local_root_gets_no_s3a_and_a_confs_own_settings_stay(tmp_path, monkeypatch):
    local = {"spark.jars": "/mine.jar"}
    assert spark.with_storage(local, StorageLayout(str(tmp_path))) == local
    own = {"spark.jars": "/mine.jar", "spark.hadoop.fs.s3a.path.style.access": "false",
           "spark.driver.extraJavaOptions": "-Dmine=1", "spark.files": "/data.txt"}
    options = spark.with_storage(own, StorageLayout("s3://bucket/lake", StoreOptions(endpoint="https://s3.internal")))
    assert options["spark.jars"] == ",".join(["/mine.jar", *S3A_JARS])
    assert options["spark.hadoop.fs.s3a.path.style.access"] == "false"   # the conf's, kept
    assert (options["spark.driver.extraJavaOptions"], options["spark.files"]) == ("-Dmine=1", "/data.txt")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    trusted = spark.with_storage(own, StorageLayout("s3://bucket/lake", StoreOptions(
        endpoint="https://s3.internal", ca_file=str(ca_bundle(tmp_path, 1)))))
    store = next((tmp_path / "cache" / "deltanode").glob("s3-truststore-*.p12"))
    assert trusted["spark.driver.extraJavaOptions"] == (f'-Dmine=1 -Djavax.net.ssl.trustStore="{store}" '
                                                        "-Djavax.net.ssl.trustStoreType=PKCS12")
    assert trusted["spark.executor.extraJavaOptions"] == (f"-Djavax.net.ssl.trustStore={store.name} "
                                                          "-Djavax.net.ssl.trustStoreType=PKCS12")
    assert trusted["spark.files"] == f"/data.txt,{store}"


def test_the_trust_store_holds_every_certificate_of_the_bundle_and_opens_without_a_password(tmp_path):
    store = s3a.trust_store(str(ca_bundle(tmp_path, 2)), tmp_path / "stores")
    listed = subprocess.run(["keytool", "-list", "-keystore", str(store), "-storetype", "PKCS12"], capture_output=True,
                            text=True, stdin=subprocess.DEVNULL)
    assert listed.returncode == 0, listed.stderr
    assert "Your keystore contains 2 entries" in listed.stdout and listed.stdout.count("trustedCertEntry") == 2
    assert s3a.trust_store(str(ca_bundle(tmp_path, 2)), tmp_path / "stores") == store    # once per bundle
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    with pytest.raises(s3a.BadCaFile, match="no PEM certificate"):
        s3a.trust_store(str(tmp_path / "empty.pem"), tmp_path / "stores")


def ca_bundle(tmp_path: Path, count: int) -> Path:
    """A PEM bundle of ``count`` self-signed CA certificates (made once per test directory)."""
    bundle = tmp_path / f"bundle-{count}.pem"
    if not bundle.exists():
        pems = []
        for i in range(count):
            cert = tmp_path / f"ca{i}.pem"
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k"),
                            "-out", str(cert), "-days", "1", "-subj", f"/CN=ca{i}"], check=True, capture_output=True)
            pems.append(cert.read_text())
        bundle.write_text("".join(pems))
    return bundle
