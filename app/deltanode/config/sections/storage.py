"""Where Delta tables live (``storage.*``, or ``milvus.storage.*`` for a mirrored Milvus's files):
the root and how to reach an S3-compatible store. ``delta.StorageLayout.of`` makes the layout of it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class S3Settings:
    """The ``storage.s3.*`` keys (all None: AWS's defaults and the environment's credentials). Both sides."""

    endpoint: str | None = None        # http(s)://host:port of an S3-compatible server
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    ca_file: str | None = None         # PEM bundle to trust instead of the system's


@dataclass(frozen=True, kw_only=True)
class StorageSettings:
    """A storage root and how to reach it. Both sides."""

    root: str                          # a path, file://, or s3://bucket/prefix
    s3: S3Settings = S3Settings()
    fsync: bool = True                 # storage.fsync: a filesystem's files and commits are fsynced
