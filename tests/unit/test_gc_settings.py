"""The driver's collector settings: a long full collection is logged."""

from __future__ import annotations

import gc
import logging

from deltanode import driver_gc as gc_settings


def test_a_long_full_collection_is_logged_and_a_young_one_is_not(monkeypatch, caplog):
    monkeypatch.setattr(gc_settings, "LONG_PAUSE", 0.0)
    thresholds, callbacks = gc.get_threshold(), list(gc.callbacks)
    try:
        gc_settings.tune_for_driver()
        gc_settings.tune_for_driver()   # once is enough: the callback is not added twice
        assert gc.get_threshold() == gc_settings.DRIVER_THRESHOLDS
        with caplog.at_level(logging.INFO, logger="deltanode.driver_gc"):
            gc.collect(0)
            assert not caplog.records
            gc.collect()
        assert len(caplog.records) == 1 and "full garbage collection held the driver" in caplog.text
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks[:] = callbacks   # the interpreter's own list: replacing the attribute would not do
