"""Milvus 2.6 transactions of one vchannel, assembled from what a TimeTick released.

As Milvus's own scanner (main module ``wal/utility/txn_buffer.go``) does with each batch the
reorder buffer pops, in time-tick order: a message without ``_tx`` passes through; a BeginTxn
opens its transaction (a second BeginTxn of an open id is ignored); a member of an open
transaction is held, one of a transaction not open (never begun in what was read, ended,
expired) is ignored; a CommitTxn hands on the held members, each re-stamped with the commit's
time tick (``wal_adaptor.restamp``); a RollbackTxn drops them. After the batch, every transaction
whose expiry (its last member's time tick, its BeginTxn's while it has none, plus the BeginTxn's
keepalive; never for -1 s) is at or below the TimeTick is dropped (docs/milvus-facts.md §13).

Pure logic; runs on executors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.positions import LOGICAL_BITS
from ..wire.wal_message import Txn
from .wal_adaptor import Kind, WalEntry, restamp


@dataclass
class _OpenTxn:
    """A transaction between its BeginTxn and its end: its members held, and the time tick of the
    last of them (of the BeginTxn while none)."""

    txn: Txn
    last_tt: int
    members: list[WalEntry] = field(default_factory=list)

    def expired(self, tick: int) -> bool:
        """Whether ``tick`` reached its expiry, in physical milliseconds (Milvus's ``ExpiredTimeTick``)."""
        if not self.txn.expires:
            return False
        return self.last_tt + (self.txn.keepalive_ms << LOGICAL_BITS) <= tick


@dataclass
class TxnBuffer:
    """The open transactions of one vchannel, by txn id. Runs on executors."""

    _open: dict[int, _OpenTxn] = field(default_factory=dict)

    @property
    def open(self) -> bool:
        return bool(self._open)

    def handle(self, released: list[WalEntry], tick: int) -> list[WalEntry]:
        """What ``released`` (ascending time ticks, all at or below ``tick``) hands on, in order."""
        out: list[WalEntry] = []
        for entry in released:
            txn = entry.wal.txn
            if txn is None:
                out.append(entry)
                continue
            kind = entry.adapted.kind
            if kind is Kind.BEGIN:
                self._open.setdefault(txn.txn_id, _OpenTxn(txn, entry.time_tick))
            elif kind is Kind.COMMIT:
                ended = self._open.pop(txn.txn_id, None)
                if ended is not None:
                    out.extend(WalEntry(offset=m.offset, wal=m.wal, adapted=restamp(m.adapted, entry.time_tick),
                                        value=m.value) for m in ended.members)
            elif kind is Kind.ROLLBACK:
                self._open.pop(txn.txn_id, None)
            else:
                held = self._open.get(txn.txn_id)
                if held is not None:
                    held.members.append(entry)
                    held.last_tt = entry.time_tick
        for txn_id in [i for i, t in self._open.items() if t.expired(tick)]:
            del self._open[txn_id]
        return out
