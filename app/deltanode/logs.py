"""Log format and levels of a DeltaNode process (``log.level``)."""

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

