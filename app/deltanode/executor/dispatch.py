"""One offset range of a pchannel, dispatched to the routers of its vchannels (executor).

Each message is parsed once, whatever the number of vchannels it concerns: an Insert or
Delete goes to the router of its ``shardName``, a TimeTick to every router still seeking or
whose replay filter is active (the others only need the last tick, read at the end), a Flush to the routers of
the collections it names, a drop to the routers of its collection. A message that does not
parse cannot name its vchannel: it is quarantined once, under the first vchannel (by name)
that reads its offset. A router that raises is failed alone; the range goes on for the rest.
"""

from __future__ import annotations

from ..records import Portion, ReadRange, ReadStats
from . import decode
from .route import VchannelRouter


class PchannelDispatcher:
    def __init__(self, piece: ReadRange, routers: list[VchannelRouter]) -> None:
        self.piece = piece
        self.routers = sorted(routers, key=lambda r: r.ctx.vchannel)
        self._by_shard = {r.ctx.vchannel: r for r in self.routers}
        self._by_collection: dict[int, list[VchannelRouter]] = {}
        self._by_name: dict[str, list[VchannelRouter]] = {}
        for r in self.routers:
            self._by_collection.setdefault(r.ctx.collection_id, []).append(r)
            self._by_name.setdefault(r.ctx.collection_name, []).append(r)
        self._ticked = [r for r in self.routers if r.needs_ticks]
        self._failed: dict[str, str] = {}
        self.messages = self.bytes = self.dml_messages = self.dml_bytes = 0
        self._tick = (0, -1)          # (ts, offset) of the last TimeTick
        self.error: str | None = None
        self.next_position: int | None = None   # the broker's next message, past a gap after the range

    def on_message(self, offset: int, value: bytes | None) -> None:
        size = len(value or b"")
        self.messages += 1
        self.bytes += size
        try:
            msg_type, msg = decode.parse(value)
        except decode.Reject as e:
            reader = next((r for r in self.routers if r.first <= offset and r.ctx.vchannel not in self._failed), None)
            if reader is not None:
                self._call(reader, reader.quarantine, offset, value, str(e), None)
            return
        if msg is None:
            return
        if msg_type == decode.MSG_INSERT or msg_type == decode.MSG_DELETE:
            self.dml_messages += 1
            self.dml_bytes += size
            router = self._by_shard.get(msg.shardName)
            if router is not None and router.first <= offset:
                self._call(router, router.dml, offset, msg_type, msg, value)
        elif msg_type == decode.MSG_TIME_TICK:
            ts = msg.base.timestamp
            self._tick = (max(ts, self._tick[0]), offset)
            for router in self._ticked:
                if router.first <= offset and router.needs_ticks:
                    self._call(router, router.tick, ts, offset)
        elif msg_type == decode.MSG_FLUSH:
            for name in msg.collection_names:
                for router in self._by_name.get(name, ()):
                    if router.first <= offset:
                        self._call(router, router.control, offset, msg_type, msg)
        else:  # DropCollection, DropPartition
            for router in self._by_collection.get(msg.collectionID, ()):
                if router.first <= offset:
                    self._call(router, router.control, offset, msg_type, msg)

    def _call(self, router: VchannelRouter, method, *args) -> None:
        if router.ctx.vchannel in self._failed:
            return
        try:
            method(*args)
        except Exception as e:  # noqa: BLE001 - one vchannel's failure must not stop the others
            self._failed[router.ctx.vchannel] = f"{type(e).__name__}: {e}"

    def broker_failed(self, error: str) -> None:
        self.error = error

    def finish(self) -> tuple[list[Portion], ReadStats]:
        ts, at = self._tick
        portions = []
        for r in self.routers:
            error = self.error or self._failed.get(r.ctx.vchannel)
            if error is not None:
                portions.append(r.fail(error))
            else:
                try:
                    portions.append(r.finish(ts if at >= r.first else 0))
                except Exception as e:  # noqa: BLE001 - e.g. a binlog file that cannot be closed
                    portions.append(r.fail(f"{type(e).__name__}: {e}"))
        p = self.piece
        return portions, ReadStats(p.pchannel, p.first, p.end, self.messages, self.bytes, self.dml_messages,
                                   self.dml_bytes, self.error, self.next_position)
