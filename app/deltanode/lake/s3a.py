"""Spark's way to tables on S3 (driver): Hadoop's S3A connector, set from the conf's ``StoreOptions``.

A ``storage.root = s3://...`` is read by S3A (``hadoop-aws`` and the AWS SDK v2 modules it loads:
the ``s3a`` component bootstrap fetched, build/jvm/s3a/pom.xml). Its settings come in two parts:

- ``s3a_options``, Spark properties given before the session's JVM starts, none of them secret:
  ``s3://`` served by S3A as ``s3a://`` is; a custom endpoint with path-style addressing (an
  S3-compatible server such as MinIO or moto has no bucket host names), over plain HTTP for an
  ``http://`` endpoint; the region; and for ``storage.s3.ca.file`` a JVM trust store made of that
  PEM bundle (``trust_store``), trusted instead of the JVM's own as pyarrow and boto3 trust the
  bundle instead of the system's.
- ``hand_credentials``: the keys, set on the running SparkContext's Hadoop configuration and never
  as Spark properties. pyspark passes every Spark property to spark-submit on its command line,
  where any user of the host reads it (``ps``). Spark copies that configuration into the jobs that
  read files, so the executors get the keys with their tasks.

Keys the conf leaves unset come from S3A's own chain (``AWS_ACCESS_KEY_ID`` and the other
variables, the instance's role), as with every AWS client DeltaNode makes.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ..delta.object_store import StoreOptions, is_object_store
from ..failure.errors import BadInput

FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
ABSTRACT_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3A"
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


class BadCaFile(BadInput):
    """``storage.s3.ca.file`` holds no certificate the JVM can trust (raised on the driver)."""


def s3a_options(store: StoreOptions) -> dict[str, str]:
    """The Spark properties that point S3A at ``store``'s endpoint and region (no secret, no trust store)."""
    out = {"spark.hadoop.fs.s3.impl": FILESYSTEM, "spark.hadoop.fs.AbstractFileSystem.s3.impl": ABSTRACT_FILESYSTEM}
    if store.endpoint:
        endpoint = store.endpoint if "://" in store.endpoint else f"https://{store.endpoint}"
        out["spark.hadoop.fs.s3a.endpoint"] = endpoint
        out["spark.hadoop.fs.s3a.path.style.access"] = "true"
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false" if endpoint.startswith("http://") else "true"
    if store.region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = store.region
    return out


def trust_options(trust_store: Path) -> dict[str, str]:
    """Java options and files that make ``trust_store`` the JVMs' trust store: the driver's by its
    path; an executor's by its name in the executor's working directory, where ``spark.files``
    puts it before the executor's first task (an executor of ``local[N]`` is the driver's JVM)."""
    store_type = "-Djavax.net.ssl.trustStoreType=PKCS12"
    return {"spark.driver.extraJavaOptions": f'-Djavax.net.ssl.trustStore="{trust_store}" {store_type}',
            "spark.executor.extraJavaOptions": f"-Djavax.net.ssl.trustStore={trust_store.name} {store_type}",
            "spark.files": str(trust_store)}


def credentials(store: StoreOptions) -> dict[str, str]:
    """S3A's keys for the credentials ``store`` sets (none: S3A's own chain finds them)."""
    keys = {"fs.s3a.access.key": store.access_key_id, "fs.s3a.secret.key": store.secret_access_key,
            "fs.s3a.session.token": store.session_token}
    return {k: v for k, v in keys.items() if v}


def hand_credentials(spark, storage) -> None:
    """Set the credentials of ``storage`` (a ``StorageLayout``; nothing for a local root) on
    ``spark``'s Hadoop configuration, before S3A's first use of the bucket: S3A reads them when it
    opens a bucket, and Hadoop keeps that open bucket for the JVM's life."""
    if not is_object_store(storage.root):
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in credentials(storage.options).items():
        hadoop.set(key, value)


def trust_store(ca_file: str, directory: Path | None = None) -> Path:
    """A PKCS12 trust store of the certificates in the PEM bundle ``ca_file`` (Java 17 reads no PEM
    trust store), made with keytool once per bundle content in ``directory`` (default: the user's
    cache, ``~/.cache/deltanode``, made readable by its user only). It has no password: it holds
    only certificates, which are public."""
    pem = Path(ca_file).read_bytes()
    certificates = _PEM.findall(pem)
    if not certificates:
        raise BadCaFile(f"storage.s3.ca.file {ca_file}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it")
    directory = directory or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deltanode"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / f"s3-truststore-{hashlib.sha256(pem).hexdigest()[:16]}.p12"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory(dir=directory) as work:
        staging = Path(work) / "truststore.p12"
        for i, certificate in enumerate(certificates):
            (Path(work) / f"{i}.pem").write_bytes(certificate + b"\n")
            _keytool(staging, Path(work) / f"{i}.pem", f"ca{i}")
        os.replace(staging, target)
    return target


def _keytool(store: Path, certificate: Path, alias: str) -> None:
    # Neither a MAC nor encrypted certificates: the JVM then reads the store without a password.
    command = [_keytool_binary(), "-J-Dkeystore.pkcs12.certProtectionAlgorithm=NONE",
               "-J-Dkeystore.pkcs12.macAlgorithm=NONE", "-importcert", "-noprompt", "-alias", alias,
               "-file", str(certificate), "-keystore", str(store), "-storetype", "PKCS12", "-storepass", "deltanode"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise BadCaFile(f"storage.s3.ca.file needs Java's keytool to make a trust store of it: {command[0]} "
                        "not found (set JAVA_HOME, or put keytool on PATH)") from None
    if done.returncode != 0:
        raise BadCaFile(f"keytool refused a certificate of storage.s3.ca.file: {(done.stdout + done.stderr).strip()}")


def _keytool_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "keytool") if home else "keytool"
