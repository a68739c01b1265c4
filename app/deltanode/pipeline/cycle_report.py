"""What one pipeline cycle did and where its time went (its log line, metrics, the benchmark)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CycleReport:
    """What one cycle did and where its time went (its log line; ``Pipeline.cycles`` keeps the last ones)."""

    number: int
    started: float = 0.0         # wall clock
    plan_s: float = 0.0          # watermarks and ranges
    job_s: float = 0.0           # the Spark job (read, route, write binlogs)
    task_s: float = 0.0          # its tasks' wall clock, summed
    task_cpu_s: float = 0.0      # their Python workers' CPU, summed
    task_read_s: float = 0.0     # their wait for the broker's messages, summed
    apply_s: float = 0.0         # the tasks' portions applied to the vchannels' states
    sync_s: float = 0.0          # fence, marking deletes and Delta commits
    mark_s: float = 0.0          # the Spark job marking the rows deletes remove (part of sync_s)
    seconds: float = 0.0         # the whole cycle
    capped: bool = False         # a range hit a cap: a backlog remains, the next cycle starts at once
    ranges: int = 0
    tasks: int = 0
    messages: int = 0
    bytes: int = 0
    rows: int = 0
    files: int = 0               # binlog files its tasks wrote for the vchannels that took them
    deletes: int = 0
    quarantined: int = 0
    marked_files: int = 0        # files given a new deletion vector
    marked_rows: int = 0         # rows newly marked deleted
    marked_dv_bytes: int = 0     # the size of those new deletion vectors (what the commits rewrite)
    commits: int = 0
    vchannels_committed: int = 0
    failed: list[str] = field(default_factory=list)
    commit_seconds: list[float] = field(default_factory=list)              # each Delta commit's duration
    # Per vchannel that committed rows: the commit's wall clock minus its new checkpoint's TimeTick
    # (ticks come every 200 ms, so this is insert -> durable for the last rows, within a tick).
    commit_lag: list[tuple[str, float]] = field(default_factory=list)
