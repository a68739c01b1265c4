"""Whether an error is the object store not answering, and how such a failure is worded.

An object store (S3 and its kind) that is down, cut off, overloaded or throttling reaches DeltaNode
in several shapes: botocore's connection and timeout errors and its 5xx ``ClientError`` codes on
the driver's commits, delta-rs's (Rust ``object_store``) "error sending request" and non-2xx
status texts on every read of a table, pyarrow's ``AWS Error NETWORK_CONNECTION`` / ``SLOW_DOWN``
on the executors' binlog writes (inside a failed task's text), and ``CommitInDoubt`` when neither
a put nor its read-back was answered. None of them is wrong in the process: each waits for the
store like a vchannel waits for its broker. Errors the store answered definitely (403 access
denied, 404 no such bucket) are not among them: they need an operator, and fail as they are.

Matched on the error's type names and text through its chain of causes, as ``space`` matches a
full disk. Pure logic; runs anywhere.
"""

from __future__ import annotations

import re

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


def unreachable(error: BaseException | str) -> str | None:
    """The store's words (one line, at most 300 characters) when ``error``, an exception or a
    failed task's text, says the object store did not answer; None otherwise."""
    if isinstance(error, str):
        found = _UNANSWERED.search(error)
        if found is None:
            return None
        line = next((ln for ln in error.splitlines() if found.group(0) in ln), error)
        return line.strip()[:300]
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found_text = unreachable(f"{type(current).__name__}: {current}")
        if found_text is not None:
            return found_text
        current = current.__cause__ or current.__context__
    return None
