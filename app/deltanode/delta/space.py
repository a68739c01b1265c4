"""Whether an error is a filesystem out of space, and how a storage-full failure is worded.

A full disk (``ENOSPC``) or an exhausted quota (``EDQUOT``) reaches DeltaNode in several shapes:
an ``OSError`` with its errno (Python's own files, and pyarrow's, which sets the errno of the
failed call), an error of delta-rs that only says it in its text ("No space left on device (os
error 28)", Rust's wording), and a failed Spark job whose text carries the JVM's
``java.io.IOException: No space left on device`` or the Python worker's error. The errno is
looked for first, then the text, through the chain of causes.

A storage-full failure is worded ``{where}: {reason} ({step})``: the place that is full, the
system's words for why, and what DeltaNode was doing; ``condition`` gives the node's one line
for it, the same whatever the step. Pure logic; runs anywhere.
"""

from __future__ import annotations

import errno
import os
import re

NO_SPACE = os.strerror(errno.ENOSPC)      # "No space left on device"
QUOTA = os.strerror(errno.EDQUOT)         # "Disk quota exceeded"
_BY_ERRNO = {errno.ENOSPC: NO_SPACE, errno.EDQUOT: QUOTA}
# How the reasons read without an errno: the system's words (Python, the JVM, pyarrow's detail)
# and Rust's "os error N" (delta-rs).
_TEXTS = ((NO_SPACE, NO_SPACE), (f"os error {errno.ENOSPC})", NO_SPACE),
          (QUOTA, QUOTA), (f"os error {errno.EDQUOT})", QUOTA))


def out_of_space(error: BaseException | str) -> str | None:
    """The reason (``NO_SPACE`` or ``QUOTA``) when ``error``, an exception or a failed job's text,
    says the filesystem it wrote to is out of space; None otherwise."""
    if isinstance(error, str):
        return next((reason for text, reason in _TEXTS if text in error), None)
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = current.errno if isinstance(current, OSError) else None
        if code in _BY_ERRNO:
            return _BY_ERRNO[code]
        found = out_of_space(str(current))
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None


def describe(where: str, reason: str, step: str) -> str:
    """A storage-full failure's message: ``{where}: {reason} ({step})``."""
    return f"{where}: {reason} ({step})"


def condition(message: str) -> str:
    """The node's line for a storage-full failure's ``message`` (``describe``'s): ``storage full:
    {where}: {reason}``, without the step."""
    place_and_reason = message.rsplit(" (", 1)[0] if message.endswith(")") else message
    return f"storage full: {place_and_reason}"


ROOM = 16 << 20   # free bytes that count as room again: more than a cycle's files of one vchannel need
_PATH = re.compile(r"(/[^\s:()]*)")


def path_of(message: str) -> str | None:
    """The local path a storage-full failure's ``message`` (``describe``'s) names, or None (an
    object store, or a place not named by a path)."""
    where = message.split(f": {NO_SPACE}", 1)[0].split(f": {QUOTA}", 1)[0]
    if "://" in where:
        return None
    found = _PATH.search(where)
    return found.group(1) if found else None


def has_room(path: str | None) -> bool:
    """Whether the filesystem of ``path`` has ``ROOM`` free bytes for an unprivileged writer
    (False when ``path`` is None or cannot be asked)."""
    if path is None:
        return False
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= ROOM
