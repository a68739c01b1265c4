"""How one committed batch changes a vchannel's ChannelState (pure logic, no I/O)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from .binlog_writer import DELETE_TABLE, INSERT_TABLE, FileEntry, TaskResult
from .channel_state import DROPPED, FLUSHED, GROWING, ChannelState, SegmentMeta


class BatchRangeError(RuntimeError):
    """The tasks of a batch do not cover one contiguous offset range."""


@dataclass
class BatchOutcome:
    state: ChannelState
    start: int
    end: int
    newly_dropped: set[int]
    inserted_rows: int
    deleted_rows: int
    quarantined: int
    wire_bytes: int
    messages: int
    handed_off: int      # payloads passed through the handoff directory, not the JVM
    idle: bool           # nothing to persist but the checkpoint: ticks, other shards' messages

    def coalesced(self, previous: ChannelState) -> ChannelState:
        """``previous`` with this idle batch remembered as handled but not committed."""
        state = copy.deepcopy(previous)
        state.resume_offset = self.end
        return state


def batch_range(results: list[TaskResult]) -> tuple[int, int, list[dict]]:
    tasks = sorted((e for r in results for e in r.events if e["type"] == "task"), key=lambda e: e["first"])
    if not tasks:
        raise BatchRangeError("no task summaries in the batch")
    for a, b in zip(tasks, tasks[1:]):
        if a["end"] != b["first"]:
            raise BatchRangeError(f"task ranges are not contiguous: [{a['first']}, {a['end']}) then "
                                  f"[{b['first']}, {b['end']})")
    return tasks[0]["first"], tasks[-1]["end"], tasks


def retract_after_drops(results: list[TaskResult]) -> tuple[list[TaskResult], list[FileEntry]]:
    """Take back what a task kept that a drop in an earlier task of the same batch filters out.

    A split batch's tasks run concurrently, each starting from the batch's ChannelState, so a
    task after a DropPartition (DropCollection) still kept that partition's (every) inserts
    and deletes. Within one task the router already filters them; here the later tasks'
    segment counts and binlog files of the dropped partitions are removed, so the outcome is
    the one a single task would have had. Returns the corrected results and the files to
    discard. (Quarantine rows of such messages stay: a record of bad input is never wrong.)
    """
    drops = sorted((e for r in results for e in r.events if e["type"] in ("drop_partition", "drop_collection")),
                   key=lambda e: e["offset"])
    if not drops:
        return results, []
    kept, discarded = [], []
    for r in results:
        task = next(e for e in r.events if e["type"] == "task")
        earlier = [e for e in drops if e["offset"] < task["first"]]
        everything = any(e["type"] == "drop_collection" for e in earlier)
        parts = {e["partition_id"] for e in earlier if e["type"] == "drop_partition"}
        if not everything and not parts:
            kept.append(r)
            continue

        def gone(f: FileEntry) -> bool:
            return f.table in (INSERT_TABLE, DELETE_TABLE) and (everything or f.partition_id in parts)

        segments = {s: st for s, st in r.segments.items() if not (everything or st.partition_id in parts)}
        files = [f for f in r.files if not gone(f)]
        retracted = [f for f in r.files if gone(f)]
        discarded += retracted
        rows = {t: sum(f.rows for f in retracted if f.table == t) for t in (INSERT_TABLE, DELETE_TABLE)}
        task = dict(task, inserted_rows=task["inserted_rows"] - rows[INSERT_TABLE],
                    deleted_rows=task["deleted_rows"] - rows[DELETE_TABLE])
        events = [task if e["type"] == "task" else e for e in r.events]
        kept.append(replace(r, files=files, segments=segments, events=events))
    return kept, discarded


def advance(state: ChannelState, results: list[TaskResult], now_ms: int = 0) -> BatchOutcome:
    """The state after committing ``results``: segment counts, flush/drop events, checkpoint."""
    start, end, tasks = batch_range(results)
    if start != state.next_offset():
        raise BatchRangeError(f"{state.vchannel}: batch starts at {start}, expected {state.next_offset()}")
    new = copy.deepcopy(state)
    for r in results:
        for seg_id, st in r.segments.items():
            seg = new.segments.get(seg_id)
            if seg is None:
                seg = new.segments[seg_id] = SegmentMeta(seg_id, st.partition_id, GROWING,
                                                         start_offset=st.first_offset, start_ts=st.first_ts)
            seg.num_rows += st.rows
            seg.dml_ts = max(seg.dml_ts, st.max_ts)
            seg.dml_offset = end
            if seg.start_offset < 0 or st.first_offset < seg.start_offset:
                seg.start_offset, seg.start_ts = st.first_offset, st.first_ts
    before_dropped = state.dropped_segments()
    events = sorted((e for r in results for e in r.events if e["type"] != "task"), key=lambda e: e["offset"])
    for e in events:
        if e["type"] == "flush":
            # Seal the segments that had rows before the flush; one first seen after it stays open.
            for seg in new.segments.values():
                if seg.state == GROWING and 0 <= seg.start_offset < e["offset"]:
                    seg.state, seg.dml_offset = FLUSHED, end
        elif e["type"] == "drop_partition":
            if e["partition_id"] not in new.dropped_partitions:
                new.dropped_partitions.append(e["partition_id"])
            for seg in new.segments.values():
                if seg.partition_id == e["partition_id"]:
                    seg.state = DROPPED
        elif e["type"] == "drop_collection":
            new.collection_dropped = True
            for seg in new.segments.values():
                seg.state = DROPPED
    new.checkpoint_offset = end
    new.checkpoint_ts = max([new.checkpoint_ts] + [t["max_tick"] for t in tasks])
    replay = [t["replay"] for t in tasks if t["replay"] is not None]
    if len(tasks) == 1:
        active = replay[0] if replay and (replay[0]["flushed"] or replay[0]["unflushed"]) else None
        new.replay = active
    elif replay:
        raise BatchRangeError("the replay filter ran in a split batch: it must run in one task")
    inserted = sum(t["inserted_rows"] for t in tasks)
    new.batches += 1
    new.rows += inserted
    new.dml_messages += sum(t["dml_messages"] for t in tasks)
    new.dml_bytes += sum(t["dml_bytes"] for t in tasks)
    new.committed_at_ms, new.resume_offset = now_ms, -1
    deleted, quarantined = sum(t["deleted_rows"] for t in tasks), sum(t["quarantined"] for t in tasks)
    idle = (not events and not any(r.files or r.segments for r in results) and inserted == deleted == quarantined == 0
            and new.replay == state.replay)
    return BatchOutcome(new, state.checkpoint_offset, end, new.dropped_segments() - before_dropped, inserted,
                        deleted, quarantined, sum(t["bytes"] for t in tasks), sum(t["messages"] for t in tasks),
                        sum(t.get("handed_off", 0) for t in tasks), idle)
