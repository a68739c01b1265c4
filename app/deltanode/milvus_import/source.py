"""Reading a file from a Milvus's storage (its ``localStorage.path``, or its bucket and root path).

Runs on executors. Milvus's compaction and garbage collector remove files while an import reads
them; a file that is not there raises ``FileGone``, which the import's tasks return as a result
(the driver reads the meta again) rather than fail with: Spark would retry a task in vain.
"""

from __future__ import annotations

from ..delta.layout import StorageLayout
from ..failure.errors import DeltaNodeError


class FileGone(DeltaNodeError):
    """A file the meta listed is no longer in Milvus's storage; the message is its path."""


def read_file(source: StorageLayout, path: str) -> bytes:
    """The bytes of ``path`` (relative to Milvus's storage root)."""
    fs, base = source.filesystem(source.root)
    try:
        with fs.open_input_file(f"{base}/{path}") as f:
            return f.read()
    except FileNotFoundError:
        raise FileGone(path) from None
    except OSError as e:   # S3: a missing key is an OSError naming it
        text = str(e)
        if "does not exist" in text or "NoSuchKey" in text or "not found" in text.lower():
            raise FileGone(path) from None
        raise
