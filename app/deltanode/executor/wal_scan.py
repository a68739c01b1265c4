"""One Milvus 2.6 vchannel read as Milvus's own scanner delivers it (main module
``wal/adaptor/scanner_adaptor.go``, ``handleUpstream``).

Each message of the vchannel (a TimeTick aside) passes the resume filter first, then waits in a
reorder buffer (``reorder_buffer``); a TimeTick releases what is at or below its time tick in
time-tick order into the transaction buffer (``txn_buffer``), and what comes out of that is
delivered, as Milvus hands it to its DataNode's flowgraph.

The resume filter is ``DeliverFilterTimeTickGT`` of a Milvus channel checkpoint (pkg/v2
``streaming/util/options/deliver.go``): a message at or below the checkpoint's time tick is
dropped, except a transaction's BeginTxn and members, which pass, the transaction being judged by
its CommitTxn's time tick. Milvus drops such a CommitTxn and leaves its transaction to expire in
the buffer, delivering nothing of it; here the CommitTxn ends it as a RollbackTxn would, which
delivers the same nothing and does not hold the vchannel's checkpoint back until the expiry (a
keepalive of -1 s never expires).

A scan that goes on where an earlier task's stopped (at a checkpoint of DeltaNode's own, whatever
the batch boundary or cut put it there) starts with that checkpoint's TimeTick released, as one
scan reading on would have: a message below it is refused, not applied. A scan resumed from a
Milvus channel checkpoint starts with none, as Milvus's does: its filter drops what is below.

Pure logic; runs on executors.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..wire.wal_message import T_COMMIT_TXN
from .reorder_buffer import ReorderBuffer
from .txn_buffer import TxnBuffer
from .wal_adaptor import Adapted, Kind, WalEntry

_ENDED_BEFORE_THE_CHECKPOINT = Adapted(kind=Kind.ROLLBACK)


def after_checkpoint(entry: WalEntry, checkpoint_ts: int) -> WalEntry | None:
    """``entry`` as the resume filter of a checkpoint at ``checkpoint_ts`` passes it, or None when
    it is dropped (a CommitTxn at or below it comes back as the end of its transaction, delivering
    nothing)."""
    wal = entry.wal
    if wal.time_tick > checkpoint_ts or (wal.txn is not None and wal.type != T_COMMIT_TXN):
        return entry
    if wal.txn is not None:
        return replace(entry, adapted=_ENDED_BEFORE_THE_CHECKPOINT)
    return None


@dataclass
class WalScan:
    """A vchannel's 2.6 messages between TimeTicks. Runs on executors."""

    checkpoint_ts: int = 0   # the resume filter's (0: none)
    tick: int = 0            # the TimeTick released before the first message (0: none)
    _reorder: ReorderBuffer[WalEntry] = field(default_factory=ReorderBuffer)
    _txns: TxnBuffer = field(default_factory=TxnBuffer)

    def __post_init__(self) -> None:
        self._reorder.pop_until(self.tick)

    def push(self, entry: WalEntry, tick_before: int = 0) -> bool:
        """Read ``entry``, ``tick_before`` being the last TimeTick read before it (a TimeTick handed
        to a scan that held nothing releases nothing, so it may not have been handed); False when
        it breaks the time-tick rule (below the last TimeTick: Milvus's scanner refuses it)."""
        if not self.holding:
            self._reorder.pop_until(tick_before)
        if self.checkpoint_ts:
            passed = after_checkpoint(entry, self.checkpoint_ts)
            if passed is None:
                return True
            entry = passed
        return self._reorder.push(entry.time_tick, entry)

    def release(self, tick: int) -> list[WalEntry]:
        """What a TimeTick at ``tick`` delivers, in order."""
        return self._txns.handle(self._reorder.pop_until(tick), tick)

    @property
    def last_released(self) -> int:
        """The time tick of the last TimeTick that released (0: none)."""
        return self._reorder.last_popped

    @property
    def holding(self) -> bool:
        """Whether it holds a message not delivered yet: in the reorder buffer, or in an open transaction."""
        return bool(len(self._reorder)) or self._txns.open
