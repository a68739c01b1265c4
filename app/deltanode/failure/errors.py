"""The root of every exception DeltaNode raises of its own, and the one family under it.

Standard library only: the command line catches these before anything else is loaded, and
executors raise them inside Spark tasks. An error may carry the ``FailureKind`` it always stands
for (``kind``), the way Milvus's ``merr`` errors carry their code; the classifier
(``failure.classify``) reads it, and an error without one takes the kind of what its caller was
doing.
"""

from __future__ import annotations

from typing import ClassVar

from .kinds import FailureKind


class DeltaNodeError(Exception):
    """An error of DeltaNode's own. Runs on the driver and on executors."""

    kind: ClassVar[FailureKind | None] = None   # the kind it always stands for; None: its caller's


class BadInput(DeltaNodeError, ValueError):
    """Input that does not parse or is not allowed: a conf value, a name, a message, a file, a
    schema. Also a ``ValueError``, as the standard library's parsers say it, so that a caller
    parsing with both catches both. Runs on the driver and on executors."""
