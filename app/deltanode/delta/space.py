"""How a storage-full failure reads to an operator, and whether its filesystem has room again.

Whether an error is a filesystem out of space is ``failure.causes.out_of_space``'s to say; a
storage-full failure's message is ``{where}: {reason} ({step})`` (``failure.classify.worded``):
the place that is full, the system's words for why, and what DeltaNode was doing. ``condition``
gives the node's one line for it, the same whatever the step. Pure logic but for ``has_room``,
which asks the filesystem; runs anywhere.
"""

from __future__ import annotations

import os
import re

from ..failure.causes import NO_SPACE, QUOTA


def condition(message: str) -> str:
    """The node's line for a storage-full failure's ``message`` (``classify.worded``'s): ``storage full:
    {where}: {reason}``, without the step."""
    place_and_reason = message.rsplit(" (", 1)[0] if message.endswith(")") else message
    return f"storage full: {place_and_reason}"


ROOM = 16 << 20   # free bytes that count as room again: more than a cycle's files of one vchannel need
_PATH = re.compile(r"(/[^\s:()]*)")


def path_of(message: str) -> str | None:
    """The local path a storage-full failure's ``message`` (``classify.worded``'s) names, or None (an
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
