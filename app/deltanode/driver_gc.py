"""The cyclic garbage collector's thresholds for a long-running driver (runs on the driver).

Every cycle the driver replaces a few objects per vchannel that live until the next cycle or
longer: its working ChannelState, a batch outcome, a routing context, a portion. With
CPython's default thresholds (700, 10, 10) those survive two young collections and count as
long-lived, so a full collection, which walks every object of the process, comes every ten
young-generation ones: at 10,000 idle vchannels the collector then takes about a third of the
driver's time (``gc.callbacks``, docs/platform.md). With a young generation of 50,000 objects
most of a cycle's objects die before their first collection, and a full one waits for 100
second-generation ones, so full collections come minutes apart.

Nothing is left uncollected: reference cycles the driver leaves behind are found by the next
full collection, only later.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)
DRIVER_THRESHOLDS = (50_000, 20, 100)
LONG_PAUSE = 0.1   # seconds: a full collection at least this long is logged


def tune_for_driver() -> None:
    """Set the driver's thresholds (a Python worker keeps CPython's: ``executor.worker_gc`` sets
    its collector around each task instead), and log every full collection that held the
    driver ``LONG_PAUSE`` or longer: every thread waits for it."""
    gc.set_threshold(*DRIVER_THRESHOLDS)
    if _time_full_collections not in gc.callbacks:
        gc.callbacks.append(_time_full_collections)


_started = 0.0


def _time_full_collections(phase: str, info: dict) -> None:
    global _started
    if info.get("generation") != 2:
        return
    if phase == "start":
        _started = time.monotonic()
        return
    paused = time.monotonic() - _started
    if paused >= LONG_PAUSE:
        log.info("a full garbage collection held the driver %.2f s (%d objects collected)", paused,
                 info.get("collected", 0))
