"""Whether etcd answered a node lately, and since when it has not.

A DataNode keeps persisting while etcd is unreachable (its commits are compare-and-swaps on
each vchannel's Delta ``txn``, which needs no etcd), so an outage is a state to report, not
an error to stop on, told once (``outages``). Every etcd user of the node (the lease
keep-alive, the fence) reports here.
"""

from __future__ import annotations

import logging

from ..outages import Outage, describe

log = logging.getLogger(__name__)


class Reachability(Outage):
    """Runs on the driver; ``failed``/``answered`` from any thread, as often as they happen. The
    first answer ends an outage."""

    def __init__(self, endpoints: str) -> None:
        super().__init__("etcd", endpoints, log=log,
                         consequence="the DataNode keeps committing the channels it owns, on Delta's txn check alone")
        self.endpoints = endpoints


def describe_outage(since: float, error: str, now: float | None = None) -> str:
    """``etcd unreachable since HH:MM:SS (N s): error`` for an outage that started at ``since`` (wall clock)."""
    return describe("etcd", since, error, now)
