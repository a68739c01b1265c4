"""Whether an error says a cause outside the process: a filesystem out of space, or an object store
that did not answer. Pure logic, standard library only; runs anywhere.

A full disk (``ENOSPC``) or an exhausted quota (``EDQUOT``) reaches DeltaNode in several shapes:
an ``OSError`` with its errno (Python's own files, and pyarrow's, which sets the errno of the
failed call), an error of delta-rs that only says it in its text ("No space left on device (os
error 28)", Rust's wording), and a failed Spark job whose text carries the JVM's
``java.io.IOException: No space left on device`` or the Python worker's error. The errno is
looked for first, then the text, through the chain of causes.

An object store (S3 and its kind) that is down, cut off, overloaded or throttling reaches DeltaNode
as botocore's connection and timeout errors and its 5xx ``ClientError`` codes on the driver's
commits, delta-rs's (Rust ``object_store``) "error sending request" and non-2xx status texts on
every read of a table, pyarrow's ``AWS Error NETWORK_CONNECTION`` / ``SLOW_DOWN`` on the
executors' binlog writes (inside a failed task's text), and ``CommitInDoubt`` when neither a put
nor its read-back was answered. Each waits for the store like a vchannel waits for its broker.
Errors the store answered definitely (403 access denied, 404 no such bucket) are not among them:
they need an operator, and fail as they are. Matched on the error's type names and text through
its chain of causes.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator

NO_SPACE = os.strerror(errno.ENOSPC)      # "No space left on device"
QUOTA = os.strerror(errno.EDQUOT)         # "Disk quota exceeded"
_BY_ERRNO = {errno.ENOSPC: NO_SPACE, errno.EDQUOT: QUOTA}
# How the reasons read without an errno: the system's words (Python, the JVM, pyarrow's detail)
# and Rust's "os error N" (delta-rs).
_TEXTS = ((NO_SPACE, NO_SPACE), (f"os error {errno.ENOSPC})", NO_SPACE),
          (QUOTA, QUOTA), (f"os error {errno.EDQUOT})", QUOTA))

# Each pattern is checked against "TypeName: message" of every error in the chain.
_UNANSWERED = re.compile("|".join((
    # botocore (the driver's commits and reads through boto3)
    r"EndpointConnectionError", r"ConnectTimeoutError", r"ReadTimeoutError", r"ConnectionClosedError",
    r"Could not connect to the endpoint URL", r"Connect timeout on endpoint URL", r"Read timeout on endpoint URL",
    r"An error occurred \((?:InternalError|ServiceUnavailable|SlowDown|RequestTimeout|500|502|503|504)\)",
    # DeltaNode's own word for a put and read-back the store never answered
    r"CommitInDoubt",
    # delta-rs (object_store crate)
    r"error sending request", r"Server returned non-2xx status code: 5\d\d", r"status: 5\d\d",
    r"(?:connection|Connection) (?:refused|reset)", r"operation timed out", r"dns error",
    # pyarrow's S3 filesystem (the executors' writes)
    r"AWS Error (?:NETWORK_CONNECTION|SLOW_DOWN|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|REQUEST_TIMEOUT)",
    r"curlCode: (?:6|7|28|52|56)\b",
)))


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and its causes (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def out_of_space(error: BaseException | str) -> str | None:
    """The reason (``NO_SPACE`` or ``QUOTA``) when ``error``, an exception or a failed job's text,
    says the filesystem it wrote to is out of space; None otherwise."""
    if isinstance(error, str):
        return next((reason for text, reason in _TEXTS if text in error), None)
    for current in _chain(error):
        code = current.errno if isinstance(current, OSError) else None
        if code in _BY_ERRNO:
            return _BY_ERRNO[code]
        found = out_of_space(str(current))
        if found is not None:
            return found
    return None


def store_unanswered(error: BaseException | str) -> str | None:
    """The store's words (one line, at most 300 characters) when ``error``, an exception or a
    failed task's text, says the object store did not answer; None otherwise."""
    if isinstance(error, str):
        found = _UNANSWERED.search(error)
        if found is None:
            return None
        line = next((ln for ln in error.splitlines() if found.group(0) in ln), error)
        return line.strip()[:300]
    for current in _chain(error):
        found_text = store_unanswered(f"{type(current).__name__}: {current}")
        if found_text is not None:
            return found_text
    return None
