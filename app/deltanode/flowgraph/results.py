"""Typed records that flow from a task (executor) back to a vchannel's flowgraph (driver).

A task reads offset ranges of pchannels; for each vchannel whose messages it routed it
returns one ``Portion``: the vchannel's share ``[first, end)`` of one range, the binlog files
written for it, per-segment counts and the control events (flush, drops) it saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..storage.binlog_writer import FileEntry, SegmentStats

FLUSH, DROP_PARTITION, DROP_COLLECTION = "flush", "drop_partition", "drop_collection"


@dataclass(frozen=True)
class ControlEvent:
    kind: str              # FLUSH, DROP_PARTITION or DROP_COLLECTION
    offset: int
    ts: int
    partition_id: int = -1


@dataclass(frozen=True)
class PortionStats:
    max_tick: int = 0       # the largest TimeTick in the portion, 0 if none
    dml_messages: int = 0   # this vchannel's Insert/Delete messages, with their wire bytes
    dml_bytes: int = 0
    inserted_rows: int = 0
    deleted_rows: int = 0
    quarantined: int = 0


@dataclass(frozen=True)
class Portion:
    """What one task did for one vchannel over offsets ``[first, end)`` of its pchannel."""

    vchannel: str
    first: int
    end: int
    files: tuple[FileEntry, ...] = ()
    segments: dict[int, SegmentStats] = field(default_factory=dict)
    events: tuple[ControlEvent, ...] = ()
    stats: PortionStats = PortionStats()
    replay: dict | None = None     # the replay filter's state at ``end`` while it is active
    error: str | None = None       # the vchannel failed in this task; nothing of it is kept
    tickless: int = 0              # pack order: messages read without a TimeTick to end at; nothing done
    sealed: tuple[int, ...] = ()   # segments it sealed at the context's flush ts (their rows reach it)


@dataclass(frozen=True)
class ReadStats:
    """One offset range of a pchannel as a task read it (all its vchannels together)."""

    pchannel: str
    first: int
    end: int
    messages: int = 0
    bytes: int = 0
    dml_messages: int = 0
    dml_bytes: int = 0
    error: str | None = None       # the broker could not serve the range; its vchannels fail
    next_position: int | None = None   # past ``end``: the pchannel has no message in [end, next_position)
