"""Log format and levels of every DeltaNode process: the driver and the Python processes
Spark starts for a flowgraph's sink commits."""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(level: str = "INFO") -> None:
    """Log to stderr with timestamps at ``level`` (log.level)."""
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format=FORMAT, force=True)
    for noisy in ("py4j", "py4j.clientserver", "kafka", "grpc", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.root.level))


def deltanode_level() -> str:
    """The level DeltaNode's loggers run at in this process, to hand to Spark's Python processes."""
    return logging.getLevelName(logging.getLogger("deltanode").getEffectiveLevel())


def ensure_logging(level: str) -> None:
    """In a process Spark started (no handler yet), log like the driver does."""
    if not logging.getLogger().handlers:
        setup_logging(level)
