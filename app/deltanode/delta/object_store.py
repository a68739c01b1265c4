"""Where ``storage.root`` lives: a local (or mounted) filesystem, or an S3-compatible object store.

Three clients reach the same files, and ``StoreOptions`` configures all three alike:

- pyarrow's filesystem writes the binlog files (on executors) and the status documents;
- delta-rs (``deltalake``) creates, reads and checkpoints the tables (driver, admin);
- DeltaNode's own commit writer (``delta_log``) puts each Delta version file *if absent*: with
  ``link(2)`` on a filesystem, with a conditional PUT (``If-None-Match: *``, answered 412 when
  the version exists) on S3. Never a copy-then-rename: two writers of one vchannel must not
  both commit (docs/object-storage.md).

Credentials left unset come from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``,
instance roles, ...), as every AWS client finds them. ``StoreOptions`` is small and picklable:
tasks carry it inside their ``StorageLayout``.
"""

from __future__ import annotations

import functools
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyarrow import fs as pafs

from ..failure.errors import BadInput

if TYPE_CHECKING:   # a task's worker unpickles StoreOptions and never loads the conf's modules
    from ..config.sections.storage import S3Settings

OBJECT_STORE_SCHEMES = ("s3",)


class UnsupportedStorage(BadInput):
    """A storage root this version cannot commit to atomically."""


@dataclass(frozen=True)
class StoreOptions:
    """The ``storage.s3.*`` keys (all None: AWS's defaults and the environment's credentials), and
    whether writes to a filesystem are fsynced."""

    endpoint: str | None = None        # http(s)://host:port of an S3-compatible server
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    ca_file: str | None = None         # PEM bundle to trust instead of the system's (pyarrow, boto3)
    # ``storage.fsync``: on a filesystem, files and commits are fsynced before a commit counts as
    # done (``durable``); an object store ignores it.
    fsync: bool = True

    @classmethod
    def of(cls, s3: S3Settings, *, fsync: bool) -> StoreOptions:
        """From the conf's S3 keys (``config.sections.storage``) and ``storage.fsync``."""
        return cls(s3.endpoint, s3.region, s3.access_key_id, s3.secret_access_key, s3.session_token, s3.ca_file,
                   fsync=fsync)

    def _endpoint_parts(self) -> tuple[str | None, str | None]:
        """(scheme, host:port) of the endpoint."""
        if not self.endpoint:
            return None, None
        url = urllib.parse.urlsplit(self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}")
        return url.scheme, url.netloc

    def pyarrow(self) -> pafs.S3FileSystem:
        scheme, host = self._endpoint_parts()
        return pafs.S3FileSystem(access_key=self.access_key_id, secret_key=self.secret_access_key,
                                 session_token=self.session_token, region=self.region, scheme=scheme,
                                 endpoint_override=host, tls_ca_file_path=self.ca_file)

    def delta_rs(self) -> dict[str, str]:
        """delta-rs ``storage_options`` (object_store's AWS keys)."""
        scheme, _ = self._endpoint_parts()
        out = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": self.region, "AWS_ACCESS_KEY_ID": self.access_key_id,
               "AWS_SECRET_ACCESS_KEY": self.secret_access_key, "AWS_SESSION_TOKEN": self.session_token,
               "AWS_ALLOW_HTTP": "true" if scheme == "http" else None}
        return {k: v for k, v in out.items() if v}

    def boto3(self):
        """An S3 client for the conditional PUTs of the commit writer (driver only).

        Its timeouts are bounded (``BOTO_*``): a commit runs on the pipeline's loop thread and
        puts and reads back up to three times, so botocore's defaults (60 s to connect, 60 s to
        read, each attempt retried) would hold every other collection's commit for minutes on an
        endpoint that drops packets. A version file is a few kilobytes: 30 s is ample to send it."""
        import boto3  # the driver's commit writer alone needs it
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint or None, region_name=self.region,
                            aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
                            aws_session_token=self.session_token, verify=self.ca_file or None,
                            config=Config(connect_timeout=BOTO_CONNECT_TIMEOUT, read_timeout=BOTO_READ_TIMEOUT,
                                          retries={"mode": "standard", "max_attempts": BOTO_ATTEMPTS}))


LOCAL = StoreOptions()
BOTO_CONNECT_TIMEOUT = 5.0   # seconds
BOTO_READ_TIMEOUT = 30.0
BOTO_ATTEMPTS = 2            # botocore's own attempts per request; the commit settles the rest by reading back


def scheme_of(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def check_supported(uri: str) -> None:
    """Raise UnsupportedStorage unless ``uri`` is a path, ``file://`` or ``s3://``."""
    if scheme_of(uri) not in ("file", *OBJECT_STORE_SCHEMES):
        raise UnsupportedStorage(f"{uri}: Delta commits need an atomic put-if-absent; this version has one for "
                                 f"local and mounted filesystems (a path or file://) and for S3 (s3://, conditional "
                                 f"PUT) only")


def is_object_store(uri: str) -> bool:
    return scheme_of(uri) in OBJECT_STORE_SCHEMES


def filesystem(uri: str, options: StoreOptions = LOCAL) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and the path inside it of a table URI or local path."""
    check_supported(uri)
    if is_object_store(uri):
        return _object_store(options), uri.split("://", 1)[1]
    return _LOCAL_FS, uri.removeprefix("file://")


_LOCAL_FS = pafs.LocalFileSystem()


@functools.lru_cache(maxsize=16)
def _object_store(options: StoreOptions) -> pafs.FileSystem:
    """One S3 client per process and settings (each file of each task asked for a new one)."""
    return options.pyarrow()


def delta_storage_options(uri: str, options: StoreOptions = LOCAL) -> dict[str, str] | None:
    """What delta-rs needs to open ``uri`` (None for a local path)."""
    return options.delta_rs() if is_object_store(uri) else None


def bucket_and_key(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key
