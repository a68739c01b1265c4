"""Conf files: parsing, typed values, errors naming file:line, environment overrides."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from deltanode.config import (
    KEYS,
    Conf,
    ConfError,
    env_name,
    keys_markdown,
    load_conf,
    parse_duration,
    parse_hostports,
    parse_size,
)
from deltanode.config.sections.storage import S3Settings
from deltanode.config.settings import Settings
from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import StoreOptions
from deltanode.mq.broker import Broker
from deltanode.mq.pulsar import client_options as pulsar_client_options

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "x.conf") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def load(tmp_path, text, env=None, **kw):
    return load_conf(write(tmp_path, text), env or {}, base_dir=tmp_path, **kw)


def error(tmp_path, text, env=None) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfError) as e:
        load_conf(path, env or {}, base_dir=tmp_path)
    return str(e.value).replace(str(path), "FILE")


def test_shipped_conf_files_load():
    for name in ("standalone.conf", "datanode.conf"):
        conf = load_conf(ROOT / "conf" / name, {}, base_dir=ROOT)
        assert conf.get("storage.root") == str(ROOT / "var" / "delta")
        assert conf.spark_conf()["spark.master"] == "local[2]"
    conf = load_conf(ROOT / "conf" / "standalone.conf", {}, base_dir=ROOT)
    assert conf.get("embedded.etcd") is True and conf.get("embedded.broker") is True
    assert conf.get("etcd.endpoints") == "127.0.0.1:2379"
    assert conf.spark_conf() == {"spark.master": "local[2]", "spark.ui.enabled": "false",
                                 "spark.sql.shuffle.partitions": "2", "spark.log.level": "WARN"}
    assert load_conf(ROOT / "conf" / "datanode.conf", {}).get("embedded.etcd") is False
    mirror = load_conf(ROOT / "conf" / "milvus-mirror.conf", {}, base_dir=ROOT)
    assert (mirror.get("milvus.meta.root"), mirror.get("etcd.root")) == ("by-dev/meta", "deltanode/meta")
    assert mirror.get("embedded.etcd") is False and mirror.get("embedded.broker") is False


def test_defaults_types_and_sources(tmp_path):
    conf = load(tmp_path, "# comment\n\n  storage.root = data   # inline comment\n"
                          "datanode.batch.max.bytes = 64m\ndatanode.trigger.interval = 500ms\n"
                          "embedded.etcd = yes\nlog.level = debug\netcd.root = 'by-dev/meta'\n")
    assert conf.get("storage.root") == str(tmp_path / "data")
    assert conf.get("datanode.batch.max.bytes") == 64 << 20
    assert conf.get("datanode.trigger.interval") == 0.5
    assert conf.get("embedded.etcd") is True
    assert conf.get("log.level") == "DEBUG"
    assert conf.get("etcd.root") == "by-dev/meta"
    assert conf.get("mq.type") == "kafka"
    assert conf.get("mq.pchannel.count") == 16
    assert conf.get("session.ttl") == 30.0
    assert conf.get("etcd.endpoints") == "127.0.0.1:2379"
    assert conf.source("storage.root").endswith("x.conf:3")
    assert conf.source("mq.type") == "default"
    assert conf.raw("datanode.batch.max.bytes") == "64m"
    d = conf.to_dict()
    assert set(KEYS) <= set(d) and d["datanode.read.splits"] == 2
    with pytest.raises(KeyError, match="did you mean 'etcd.endpoints'"):
        conf.get("etcd.endpoint")


def test_uris_kept_and_paths_resolved(tmp_path):
    conf = load(tmp_path, "storage.root = file:///data/delta\nembedded.data.dir = /abs/var\n")
    assert conf.get("storage.root") == "file:///data/delta"
    assert conf.get("embedded.data.dir") == "/abs/var"
    msg = error(tmp_path, "storage.root = x\nembedded.data.dir = s3://b/var\n")
    assert msg.startswith("FILE:2: bad value for 'embedded.data.dir'")


def test_size_and_duration_parsing():
    assert parse_size("4096") == 4096
    assert parse_size("64k") == 65536
    assert parse_size("256MiB") == 256 << 20
    assert parse_size("1.5g") == 3 << 29
    assert parse_size("2 GB") == 2 << 30
    assert parse_duration("1s") == 1.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("5m") == 300.0
    assert parse_duration("2h") == 7200.0
    assert parse_duration("3") == 3.0
    for bad in ("x", "1q", "-1s", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)
    for bad in ("x", "64q", "-5m"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert parse_hostports("a:1, http://b:2/") == [("a", 1), ("b", 2)]
    with pytest.raises(ValueError):
        parse_hostports("a")


def test_unknown_key_with_suggestion(tmp_path):
    msg = error(tmp_path, "storage.root = x\n\n# c\netcd.endpoint = 127.0.0.1:2379\n")
    assert msg == "FILE:4: unknown key 'etcd.endpoint' (did you mean 'etcd.endpoints'?)"


def test_a_removed_key_says_why_it_is_gone(tmp_path):
    msg = error(tmp_path, "storage.root = x\ndatanode.checkpoint.dir = var/spark-checkpoints\n")
    assert msg.startswith("FILE:2: 'datanode.checkpoint.dir' is no longer used: the pipeline runs no Spark "
                          "streaming query")
    msg = error(tmp_path, "storage.root = x\n", {"DELTANODE_DATANODE_HANDOFF_DIR": "/dev/shm/x"})
    assert msg.startswith("env DELTANODE_DATANODE_HANDOFF_DIR: 'datanode.handoff.dir' is no longer used")


@pytest.mark.parametrize("line,expect", [
    ("datanode.read.splits = x", "bad value for 'datanode.read.splits': 'x' is not an integer"),
    ("datanode.read.splits = 0", "bad value for 'datanode.read.splits': '0' is below the minimum 1"),
    ("datanode.watch.workers = 0", "bad value for 'datanode.watch.workers': '0' is below the minimum 1"),
    ("embedded.etcd = maybe", "bad value for 'embedded.etcd': 'maybe' is not a boolean"),
    ("mq.type = rabbit", "bad value for 'mq.type': 'rabbit' is not one of kafka | pulsar"),
    ("datanode.batch.max.bytes = lots", "bad value for 'datanode.batch.max.bytes'"),
    ("session.ttl = soon", "bad value for 'session.ttl': 'soon' is not a duration"),
    ("etcd.endpoints = nohost", "bad value for 'etcd.endpoints': 'nohost' is not host:port"),
    ("mq.pulsar.service.url = http://x", "bad value for 'mq.pulsar.service.url'"),
    ("etcd.root =", "bad value for 'etcd.root': the value is empty"),
    ("log.level = loud", "bad value for 'log.level'"),
])
def test_bad_values_name_key_file_and_line(tmp_path, line, expect):
    msg = error(tmp_path, f"storage.root = x\n{line}\n")
    assert msg.startswith(f"FILE:2: {expect}"), msg


def test_the_channel_watch_runs_as_many_watches_at_once_as_configured(tmp_path):
    assert Settings.of(load(tmp_path, "storage.root = x\n")).node.watch_workers == 32
    assert Settings.of(load(tmp_path, "storage.root = x\ndatanode.watch.workers = 4\n")).node.watch_workers == 4


def test_malformed_duplicate_and_missing(tmp_path):
    assert error(tmp_path, "storage.root = x\nspark.master local[2]\n").startswith(
        "FILE:2: malformed line 'spark.master local[2]' (expected 'key = value')")
    assert error(tmp_path, "storage.root = x\n= y\n").startswith("FILE:2: malformed line")
    assert error(tmp_path, "storage.root = x\nstorage.root = y\n") == \
        "FILE:2: key 'storage.root' is set twice (first at FILE:1)"
    assert error(tmp_path, "# nothing\n").startswith("FILE: missing required key 'storage.root'")
    with pytest.raises(ConfError, match="nope.conf: conf file not found"):
        load_conf(tmp_path / "nope.conf", {})


def test_cross_key_checks(tmp_path):
    msg = error(tmp_path, "storage.root = x\nembedded.etcd = true\n"
                          "etcd.endpoints = 10.0.0.1:2379\n")
    assert msg.startswith("FILE:3: bad value for 'etcd.endpoints'") and "loopback" in msg
    msg = error(tmp_path, "storage.root = x\nembedded.broker = true\nmq.type = pulsar\n"
                          "mq.pulsar.service.url = pulsar://broker.example:6650\n")
    assert msg.startswith("FILE:4: bad value for 'mq.pulsar.service.url'") and "loopback" in msg


def test_mirror_mode_refuses_an_etcd_root_at_or_under_the_milvus_meta_root(tmp_path):
    """DeltaNode never writes under Milvus's keys: its etcd.root may not be Milvus's meta root (the
    default etcd.root is by-dev/meta, Milvus's default), nor inside it."""
    msg = error(tmp_path, "storage.root = x\nmilvus.meta.root = by-dev/meta\n")
    assert msg.startswith("FILE:2: bad value for 'milvus.meta.root'") and "etcd.root 'by-dev/meta' (default)" in msg
    msg = error(tmp_path, "storage.root = x\nmilvus.meta.root = by-dev/meta/\netcd.root = by-dev/meta/deltanode\n")
    assert msg.startswith("FILE:3: bad value for 'etcd.root'") and "inside the Milvus meta root" in msg
    conf = load(tmp_path, "storage.root = x\nmilvus.meta.root = by-dev/meta\netcd.root = by-dev/deltanode\n")
    assert conf.get("milvus.start") == "creation" and conf.get("milvus.etcd.endpoints") is None
    assert "is not one of creation | segments | checkpoint" in error(
        tmp_path, "storage.root = x\nmilvus.meta.root = m\netcd.root = d\nmilvus.start = latest\n")


def test_spark_keys_pass_through_untouched(tmp_path):
    conf = load(tmp_path, "storage.root = x\nspark.master = local[2]\n"
                          "spark.driver.extraJavaOptions = -Dx=1 -Dy='a b'\n"
                          "spark.sql.shuffle.partitions=2\n")
    assert conf.spark_conf() == {"spark.master": "local[2]",
                                 "spark.driver.extraJavaOptions": "-Dx=1 -Dy='a b'",
                                 "spark.sql.shuffle.partitions": "2"}
    assert conf.get("spark.master") == "local[2]" and conf.get("spark.nothing") is None
    assert conf.source("spark.master").endswith("x.conf:2")


def test_env_overrides(tmp_path):
    env = {"DELTANODE_STORAGE_ROOT": "/data/delta", "DELTANODE_DATANODE_READ_SPLITS": "4",
           "DELTANODE_SPARK_MASTER": "local[4]",
           "DELTANODE_SPARK_DRIVER_EXTRAJAVAOPTIONS": "-Dz=1",
           "DELTANODE_SPARK_EXECUTOR_EXTRAJAVAOPTIONS": "-Dq=1",
           "DELTANODE_SPARK_MY_CUSTOM": "v", "DELTANODE_LOG_LEVEL": "",
           "OTHER": "ignored"}
    conf = load(tmp_path, "storage.root = x\nspark.master = local[2]\n"
                          "spark.driver.extraJavaOptions = -Dx=1\nlog.level = ERROR\n", env)
    assert conf.get("storage.root") == "/data/delta"
    assert conf.source("storage.root") == "env DELTANODE_STORAGE_ROOT"
    assert conf.get("datanode.read.splits") == 4
    assert conf.get("log.level") == "ERROR"  # empty variable = unset
    assert conf.spark_conf() == {"spark.master": "local[4]",
                                 "spark.driver.extraJavaOptions": "-Dz=1",
                                 "spark.executor.extraJavaOptions": "-Dq=1",
                                 "spark.my.custom": "v"}
    assert env_name("mq.kafka.bootstrap.servers") == "DELTANODE_MQ_KAFKA_BOOTSTRAP_SERVERS"
    # the required key may come from the environment alone
    assert load(tmp_path, "", {"DELTANODE_STORAGE_ROOT": "s3://b/d"}).get("storage.root") == "s3://b/d"


def test_env_errors_name_the_variable(tmp_path):
    msg = error(tmp_path, "storage.root = x\n", {"DELTANODE_DATANODE_READ_SPLITS": "x"})
    assert msg == ("env DELTANODE_DATANODE_READ_SPLITS: bad value for 'datanode.read.splits': "
                   "'x' is not an integer")
    msg = error(tmp_path, "storage.root = x\n", {"DELTANODE_STORAGE_ROOTS": "/d"})
    assert msg.startswith("env DELTANODE_STORAGE_ROOTS: unknown variable")
    assert "did you mean DELTANODE_STORAGE_ROOT?" in msg


def test_from_dict_and_overrides(tmp_path):
    conf = Conf.from_dict({"storage.root": "d", "embedded.etcd": True, "mq.pchannel.count": 2,
                           "spark.master": "local[1]"}, base_dir=tmp_path)
    assert conf.get("embedded.etcd") is True and conf.get("mq.pchannel.count") == 2
    assert conf.get("storage.root") == str(tmp_path / "d")
    conf2 = conf.with_overrides({"mq.pchannel.count": 3})
    assert conf2.get("mq.pchannel.count") == 3 and conf2.get("embedded.etcd") is True
    assert conf2.spark_conf() == {"spark.master": "local[1]"}
    with pytest.raises(ConfError, match="unknown key 'nope'"):
        Conf.from_dict({"storage.root": "d", "nope": 1})


def test_key_table_is_documented():
    table = keys_markdown()
    assert table in (ROOT / "docs" / "configuration.md").read_text(), \
        "docs/configuration.md's key table: paste PYTHONPATH=app python -m deltanode.config"
    for name, key in KEYS.items():
        assert f"`{name}`" in table and key.doc
        if key.default is not None:
            key.parse(key.default, Path("/"))
        else:   # optional and unset by default: its doc says what unset means or how to set it
            assert key.required or "unset" in key.doc or "set it" in key.doc or key.type == "localpath"


def test_kafka_client_properties_pass_through_and_secrets_come_from_the_environment(tmp_path):
    conf = load(tmp_path, "storage.root = x\nmq.kafka.security.protocol = SASL_SSL\n"
                          "mq.kafka.sasl.mechanism = PLAIN\nmq.kafka.sasl.username = milvus\n",
                {"DELTANODE_MQ_KAFKA_SASL_PASSWORD": "s3cret", "DELTANODE_MQ_KAFKA_BOOTSTRAP_SERVERS": "k1:9093"})
    assert conf.kafka_client_conf() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                        "sasl.username": "milvus", "sasl.password": "s3cret"}
    assert conf.get("mq.kafka.bootstrap.servers") == "k1:9093"   # a declared key, not a client property
    assert conf.spark_conf() == {}                                  # nothing of it goes to Spark
    shown = conf.describe()
    assert "mq.kafka.sasl.password = ****  # env DELTANODE_MQ_KAFKA_SASL_PASSWORD" in shown
    assert "s3cret" not in shown and "mq.kafka.sasl.username = milvus" in shown
    settings = Settings.of(conf)
    broker = Broker.of(settings.broker)
    assert broker.settings["sasl.password"] == "s3cret" and "s3cret" not in repr(broker) + repr(settings)
    assert pickle.loads(pickle.dumps(broker)) == broker            # tasks carry it to executors


def test_kafka_properties_deltanode_owns_are_refused(tmp_path):
    msg = error(tmp_path, "storage.root = x\nmq.kafka.enable.auto.commit = true\n")
    assert msg == ("FILE:2: 'mq.kafka.enable.auto.commit' cannot be set: positions are committed to Delta "
                   "with the data, never to the broker")
    assert "cannot be set" in error(tmp_path, "storage.root = x\n", {"DELTANODE_MQ_KAFKA_GROUP_ID": "g"})


def test_pulsar_authentication_and_tls_reach_the_broker_seam(tmp_path):
    conf = load(tmp_path, "storage.root = x\nmq.type = pulsar\nmq.pulsar.auth.plugin = token\n"
                          "mq.pulsar.tls.allow.insecure = true\n",
                {"DELTANODE_MQ_PULSAR_AUTH_PARAMS": "token:eyJhbGciOi"})
    assert Broker.of(Settings.of(conf).broker).settings == {
        "auth.plugin": "token", "auth.params": "token:eyJhbGciOi", "tls.allow.insecure": "True",
        "receiver.queue.size": "1000"}
    assert "mq.pulsar.auth.params = ****" in conf.describe()
    options = pulsar_client_options(Broker.of(Settings.of(conf).broker).settings)
    assert set(options) == {"authentication", "tls_allow_insecure_connection"}
    assert options["tls_allow_insecure_connection"] is True


def test_storage_root_on_s3_with_its_endpoint_and_credentials(tmp_path):
    conf = load(tmp_path, "storage.root = s3://lake/milvus\nstorage.s3.endpoint = http://127.0.0.1:9000\n"
                          "storage.s3.region = eu-west-1\nstorage.s3.access.key.id = dn\n",
                {"DELTANODE_STORAGE_S3_SECRET_ACCESS_KEY": "k3y"})
    settings = Settings.of(conf)
    storage = StorageLayout.of(settings.storage)
    assert storage.insert_log(7) == "s3://lake/milvus/insert_log/7"
    assert storage.options == StoreOptions("http://127.0.0.1:9000", "eu-west-1", "dn", "k3y")
    assert "k3y" not in repr(storage.options) + repr(settings)
    assert "storage.s3.secret.access.key = ****" in conf.describe()
    assert storage.delta_options(storage.insert_log(7)) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "dn",
        "AWS_SECRET_ACCESS_KEY": "k3y", "AWS_ALLOW_HTTP": "true"}
    assert StorageLayout(str(tmp_path)).delta_options(str(tmp_path)) is None   # a local root needs none
    msg = error(tmp_path, "storage.root = gs://lake/milvus\n")
    assert msg.startswith("FILE:1: bad value for 'storage.root'") and "put-if-absent" in msg


def test_a_mirrored_milvuss_storage_is_a_section_of_its_own_keys(tmp_path):
    """``milvus.storage.*`` make the mirror's storage section, apart from DeltaNode's ``storage.*``;
    the layout made of it reaches Milvus's bucket with Milvus's credentials."""
    conf = load(tmp_path, "storage.root = delta\nstorage.fsync = false\nmilvus.meta.root = by-dev/meta\n"
                          "etcd.root = deltanode/meta\nmilvus.storage.root = s3://milvus-bucket/files\n"
                          "milvus.storage.s3.endpoint = http://minio:9000\nmilvus.storage.s3.access.key.id = m\n",
                {"DELTANODE_MILVUS_STORAGE_S3_SECRET_ACCESS_KEY": "m1n10"})
    settings = Settings.of(conf)
    assert settings.storage.root == str(tmp_path / "delta") and settings.storage.s3 == S3Settings()
    assert settings.mirror.storage is not None and "m1n10" not in repr(settings)
    milvus = StorageLayout.of(settings.mirror.storage)
    assert milvus.root == "s3://milvus-bucket/files"
    assert milvus.options == StoreOptions("http://minio:9000", None, "m", "m1n10", fsync=False)
    assert Settings.of(load(tmp_path, "storage.root = delta\n")).mirror.storage is None


def test_etcd_tls_and_login_become_the_security_of_deltanodes_and_milvuss_etcd(tmp_path):
    (tmp_path / "pw").write_text("s3cret\n")   # as an editor or a mounted secret ends it
    conf = load(tmp_path, "storage.root = x\netcd.endpoints = https://e1:2379,e2:2379\netcd.ssl.enabled = true\n"
                          "etcd.ssl.tls.ca.cert = ca.pem\netcd.ssl.tls.cert = c.pem\netcd.ssl.tls.key = k.pem\n"
                          "etcd.auth.enabled = true\netcd.auth.username = deltanode\netcd.auth.password.file = pw\n"
                          "milvus.meta.root = by-dev/meta\netcd.root = deltanode/meta\n"
                          "milvus.etcd.endpoints = m:2379\nmilvus.etcd.auth.enabled = true\n"
                          "milvus.etcd.auth.username = reader\n",
                {"DELTANODE_MILVUS_ETCD_AUTH_PASSWORD": "m1lvus"})
    settings = Settings.of(conf)
    own, milvus = settings.etcd.security, settings.mirror.etcd_security
    assert (own.tls, own.ca_cert, own.cert, own.key) == (True, str(tmp_path / "ca.pem"), str(tmp_path / "c.pem"),
                                                         str(tmp_path / "k.pem"))
    assert (own.username, own.password, own.keys) == ("deltanode", "s3cret", "etcd.")
    assert (milvus.tls, milvus.username, milvus.password, milvus.keys) == (False, "reader", "m1lvus", "milvus.etcd.")
    # Secrets never show: not in --print-conf, not in a repr; the key file's path is no secret.
    shown = conf.describe() + repr(conf) + repr(settings)
    assert "s3cret" not in shown and "m1lvus" not in shown
    assert f"etcd.auth.password = ****  # {tmp_path / 'x.conf'}:9 (file {tmp_path / 'pw'})" in conf.describe()
    assert f"etcd.ssl.tls.key = {tmp_path / 'k.pem'}" in conf.describe()
    # The environment's <KEY>_FILE reads a file too, and wins over the conf file's value.
    (tmp_path / "pw2").write_text("fr0m-env")
    conf = load(tmp_path, "storage.root = x\netcd.auth.enabled = true\netcd.auth.username = u\n"
                          "etcd.auth.password = in-file\n",
                {"DELTANODE_ETCD_AUTH_PASSWORD_FILE": str(tmp_path / "pw2")})
    assert conf.get("etcd.auth.password") == "fr0m-env"


@pytest.mark.parametrize("text, expect", [
    ("etcd.auth.password = a\netcd.auth.password.file = pw", "'etcd.auth.password.file' and 'etcd.auth.password'"),
    ("etcd.auth.password.file = missing", "cannot read the file of 'etcd.auth.password'"),
    ("etcd.auth.enabled = true\netcd.auth.username = u", "'etcd.auth.enabled': true, but etcd.auth.password is unset"),
    ("etcd.auth.username = u", "'etcd.auth.username': etcd.auth.enabled is false"),
    ("etcd.ssl.tls.ca.cert = ca.pem", "'etcd.ssl.tls.ca.cert': etcd.ssl.enabled is false"),
    ("etcd.ssl.enabled = true\netcd.ssl.tls.cert = c.pem", "needs both etcd.ssl.tls.cert and etcd.ssl.tls.key"),
    ("etcd.endpoints = https://e:2379", "names https:// while etcd.ssl.enabled is false"),
    ("milvus.etcd.ssl.enabled = true", "milvus.etcd.endpoints is unset, so Milvus's etcd is DeltaNode's"),
    ("mq.kafka.sasl.password.file = missing", "cannot read the file of 'mq.kafka.sasl.password'"),
    ("etcd.root.file = x", "unknown key 'etcd.root.file'"),
])
def test_etcd_security_keys_that_would_be_ignored_or_cannot_be_read_are_errors(tmp_path, text, expect):
    assert expect in error(tmp_path, f"storage.root = x\n{text}\n")


def test_a_kafka_secret_comes_from_a_file_too(tmp_path):
    (tmp_path / "kafka-pw").write_text("k4fka\n")
    conf = load(tmp_path, "storage.root = x\nmq.kafka.sasl.username = u\n",
                {"DELTANODE_MQ_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "kafka-pw")})
    assert conf.kafka_client_conf() == {"sasl.username": "u", "sasl.password": "k4fka"}
    assert "k4fka" not in conf.describe() + repr(conf)
