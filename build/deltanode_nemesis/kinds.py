"""What a nemesis run may break: the fault kinds, the storage modes and brokers a run can have, and
which kinds each storage mode allows (a storage fault needs the storage it breaks). Pure logic,
run in the nemesis process."""

from __future__ import annotations

import enum


class StorageMode(enum.StrEnum):
    """Where the run's ``storage.root`` lives."""

    LOCAL = "local"         # a directory of the work directory
    TMPFS = "tmpfs"         # a tmpfs of a fixed size, mounted for the run: it can be filled
    POWERCUT = "powercut"   # the tests' FUSE filesystem that drops unsynced writes at a cut
    S3 = "s3"               # a bucket of the tests' S3 server, reached through a fault proxy


class MqKind(enum.StrEnum):
    KAFKA = "kafka"
    PULSAR = "pulsar"


class FaultKind(enum.StrEnum):
    KILL_STANDALONE = "kill-standalone"     # SIGKILL of its process tree, started again after the hold
    KILL_DATANODE = "kill-datanode"
    PAUSE_STANDALONE = "pause-standalone"   # SIGSTOP, SIGCONT after the hold (past session.ttl: its lease expires)
    PAUSE_DATANODE = "pause-datanode"
    KILL_BROKER = "kill-broker"             # the broker SIGKILLed, started again on its data and ports
    PAUSE_BROKER = "pause-broker"
    PARTITION_BROKER = "partition-broker"   # the nodes' relay to the broker cut; the traffic's producer unaffected
    KILL_ETCD = "kill-etcd"
    PAUSE_ETCD = "pause-etcd"
    FILL_DISK = "fill-disk"                 # tmpfs: a file takes every free block, deleted at the heal
    POWER_CUT = "power-cut"                 # powercut: every node's tree SIGKILLed, unsynced writes dropped
    S3_ERRORS = "s3-errors"                 # s3: seeded 503s, resets and lost answers on data files and commits


# The storage faults and the one mode each needs; every other kind runs in any mode.
STORAGE_FAULTS = {FaultKind.FILL_DISK: StorageMode.TMPFS, FaultKind.POWER_CUT: StorageMode.POWERCUT,
                  FaultKind.S3_ERRORS: StorageMode.S3}

# (least, most) seconds a fault is held.
HOLDS = {FaultKind.KILL_STANDALONE: (1, 8), FaultKind.KILL_DATANODE: (1, 8),
         FaultKind.PAUSE_STANDALONE: (2, 14), FaultKind.PAUSE_DATANODE: (2, 14),
         FaultKind.KILL_BROKER: (2, 20), FaultKind.PAUSE_BROKER: (2, 20), FaultKind.PARTITION_BROKER: (2, 20),
         FaultKind.KILL_ETCD: (1, 6), FaultKind.PAUSE_ETCD: (2, 10),
         FaultKind.FILL_DISK: (3, 20), FaultKind.POWER_CUT: (1, 8), FaultKind.S3_ERRORS: (5, 25)}


def allowed(storage: StorageMode) -> list[FaultKind]:
    """The kinds a run on ``storage`` can draw, in the enum's order (the default ``--faults``)."""
    return [k for k in FaultKind if STORAGE_FAULTS.get(k, storage) == storage]


def parse_kinds(text: str, storage: StorageMode) -> list[FaultKind]:
    """The comma-separated kinds of ``text`` (empty: every kind ``storage`` allows); ValueError
    naming what is wrong: an unknown kind, a storage fault of another mode, or none at all."""
    names = [k.strip() for k in text.split(",") if k.strip()]
    if not text.strip():
        return allowed(storage)
    unknown = [n for n in names if n not in set(FaultKind)]
    if unknown:
        raise ValueError(f"unknown kind(s) {', '.join(unknown)}; the kinds: {', '.join(FaultKind)}")
    kinds = list(dict.fromkeys(FaultKind(n) for n in names))
    wrong = [f"{k} needs --storage {STORAGE_FAULTS[k]}" for k in kinds if k not in allowed(storage)]
    if wrong:
        raise ValueError(f"{'; '.join(wrong)} (this run: --storage {storage}, whose kinds are "
                         f"{', '.join(allowed(storage))})")
    if not kinds:
        raise ValueError("name at least one kind")
    return kinds
