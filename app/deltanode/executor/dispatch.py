"""One offset range of a pchannel, dispatched to the routers of its vchannels (executor).

Each message is parsed once, whatever the number of vchannels it concerns: an Insert or
Delete goes to the router of its ``shardName``, a TimeTick to every router still seeking or
whose replay filter is active (the others only need the last tick, read at the end), a Flush to the routers of
the collections it names, a drop to the routers of its collection. A message that does not
parse cannot name its vchannel: every vchannel that reads its offset quarantines it, under its own
name. Each vchannel's batches end where that vchannel's cuts fall, so "one of them" would record it
once per vchannel that a cut sends back over it; a row for each, kept from recurring by each
vchannel's own quarantine watermark, is one row per vchannel whatever the cuts, batches and
restarts. A router that raises is failed alone; the range goes on for the rest.

A router is made when its vchannel's first message comes (or at once, when it needs every
tick): an idle vchannel needs no router, no schema and no writer, and no portion of its own
either: its portion is its part of the range and the range's last tick, which the range's
``ReadStats`` carries (``ReadStats.idle_portion``). At 10,000 vchannels on 16 pchannels a task
holds 625 a pchannel, and most of them have nothing in a range of one cycle.

A message with properties whose ``_v`` is set is Milvus 2.6's (``wire.wal_message``): it goes to the
router of its ``_vc`` only (adapted by ``wal_adaptor``, its properties read first so that another
vchannel's message costs no payload parsing), which holds it until a TimeTick delivers it
(``route``, ``wal_scan``). A 2.6 streaming node appends concurrently, so a message's own ``_tt``
says nothing of the messages after it: only a TimeTick (``_t`` 1, whatever its ``_vc``) is the
pchannel's progress, and it goes to every router holding messages. A message without ``_vc`` that
is no TimeTick is Milvus's for every vchannel of the pchannel (its scanner hands it to each); one that
carries anything is quarantined by each vchannel that reads it, as a message that does not parse is
(DeltaNode cannot tell which vchannels' tables it belongs in).

The routers that need every TimeTick (seeking, replaying, holding 2.6 messages) are kept apart, and
one leaves them as soon as it needs none: a tick costs nothing for the vchannels that wait for
nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from ..failure.classify import Failure, classify
from ..failure.kinds import FailureKind
from ..records import Portion, ReadRange, ReadStats, RouteContext
from ..wire import wal_message
from . import decode, wal_adaptor
from .contexts import TaskContexts
from .route import VchannelRouter

# (context, first offset, end offset) -> the vchannel's router over [first, end)
RouterFactory = Callable[[RouteContext, int, int], VchannelRouter]
_TIME_TICK = str(wal_message.T_TIME_TICK)   # ``_t`` of a TimeTick, as written


class PchannelDispatcher:
    """Runs on an executor, in a task: one range's messages, each to the routers it concerns."""

    def __init__(self, piece: ReadRange, contexts: TaskContexts, make_router: RouterFactory, *,
                 where: str = "the storage root") -> None:
        """``contexts``: the task's; the piece's members that read some of it are its vchannels;
        ``where``: the storage root their files go under (a full one fails them as such)."""
        self.piece, self.where = piece, where
        self._make_router = make_router
        self._contexts = contexts
        starts = [(v, contexts.start(v)) for v in sorted(piece.members)]
        self._first = {v: max(piece.first, start) for v, start in starts if start < piece.end}   # by name
        self._routers: dict[str, VchannelRouter] = {}
        self._by_collection: dict[int, list[str]] | None = None   # made at the first drop or flush
        self._by_name: dict[str, list[str]] = {}
        # The routers that need every TimeTick, by vchannel: made at once for those seeking or replaying.
        self._ticked = {r.ctx.vchannel: r for r in map(self._router, (v for v in self._first if v in contexts.ticked))
                        if r.needs_ticks}
        self._failed: dict[str, Failure] = {}
        self.messages = self.bytes = self.dml_messages = self.dml_bytes = 0
        self._tick = (0, -1)          # (ts, offset) of the last TimeTick
        self.error: Failure | None = None   # the broker could not serve the range
        self.next_position: int | None = None   # the broker's next message, past a gap after the range

    def _router(self, vchannel: str) -> VchannelRouter:
        router = self._routers.get(vchannel)
        if router is None:
            router = self._routers[vchannel] = self._make_router(self._contexts.context(vchannel, self.piece),
                                                                 self._first[vchannel], self.piece.end)
        return router

    def _collections(self) -> tuple[dict[int, list[str]], dict[str, list[str]]]:
        """The vchannels of each collection, by id and by name (made once, at the first drop or flush)."""
        if self._by_collection is None:
            self._by_collection = {}
            for v in self._first:
                collection_id, name = self._contexts.collection(v)
                self._by_collection.setdefault(collection_id, []).append(v)
                self._by_name.setdefault(name, []).append(v)
        return self._by_collection, self._by_name

    def _reads(self, vchannel: str, offset: int) -> bool:
        """Whether ``offset`` is the vchannel's to read (it has not failed in this task)."""
        first = self._first.get(vchannel)
        return first is not None and first <= offset and vchannel not in self._failed

    def on_message(self, offset: int, value: bytes | None, props: dict[str, str] | None = None) -> None:
        """One message of the range; ``props``: its properties (Kafka headers, Pulsar properties), None
        when it has none."""
        size = len(value or b"")
        self.messages += 1
        self.bytes += size
        if props is not None and wal_message.VERSION in props:
            self._on_wal_message(offset, value, props, size)
            return
        try:
            msg_type, msg = decode.parse(value)
        except decode.Reject as e:
            self._quarantine_unrouted(offset, value, str(e), None)
            return
        if msg is None:
            return
        if msg_type == decode.MSG_INSERT or msg_type == decode.MSG_DELETE:
            self.dml_messages += 1
            self.dml_bytes += size
            if self._reads(msg.shardName, offset):
                payload = value or b""   # parsed as an Insert or Delete: never None
                self._call(msg.shardName, lambda r: r.dml(offset, msg_type, msg, payload))
        elif msg_type == decode.MSG_TIME_TICK:
            self._ticked_by(msg.base.timestamp, offset)
        else:
            by_collection, by_name = self._collections()
            if msg_type == decode.MSG_FLUSH:
                targets = [v for name in msg.collection_names for v in by_name.get(name, ())]
            else:  # DropCollection, DropPartition
                targets = by_collection.get(msg.collectionID, [])
            for vchannel in targets:
                if self._reads(vchannel, offset):
                    self._call(vchannel, lambda r: r.control(offset, msg_type, msg))

    def _quarantine_unrouted(self, offset: int, value: bytes | None, reason: str, msg_type: int | None) -> None:
        """A message that names no vchannel of its own: recorded by every vchannel that reads it, under its
        own name (the router's quarantine watermark skips what its committed attempts recorded)."""
        def step(router: VchannelRouter) -> None:
            router.quarantine(offset, value, reason, msg_type)

        for vchannel in self._first:
            if self._reads(vchannel, offset):
                self._call(vchannel, step)

    def _on_wal_message(self, offset: int, value: bytes | None, props: dict[str, str], size: int) -> None:
        """A Milvus 2.6 message: a TimeTick ticks every vchannel of the pchannel; any other message goes
        to its vchannel's router."""
        if props.get(wal_message.TYPE) == _TIME_TICK:
            try:
                ts = wal_message.time_tick(props)
            except wal_message.WalFormatError as e:
                self._quarantine_unrouted(offset, value, f"Milvus 2.6 message properties: {e}", None)
                return
            self._ticked_by(ts, offset)
            return
        vchannel = props.get(wal_message.VCHANNEL) or None
        if vchannel is not None and not self._reads(vchannel, offset):
            return   # another vchannel's: nothing of it matters here
        try:
            wal = wal_message.parse(props)
        except wal_message.WalFormatError as e:
            reason = f"Milvus 2.6 message properties: {e}"
            if vchannel is not None:
                self._call(vchannel, lambda r: r.quarantine(offset, value, reason, None))
            else:
                self._quarantine_unrouted(offset, value, reason, None)
            return
        adapted = wal_adaptor.adapt(value, wal)
        if vchannel is None:
            if adapted.kind is not wal_adaptor.Kind.TICK or wal.txn is not None:
                reason = adapted.reason if adapted.kind is wal_adaptor.Kind.REJECT else (
                    f"{wal.name} without a vchannel (_vc): Milvus hands it to every vchannel of the pchannel; "
                    f"DeltaNode applies it to none")
                self._quarantine_unrouted(offset, value, reason, wal_message.COMMONPB_TYPES.get(wal.type))
            return
        if adapted.msg_type == decode.MSG_INSERT or adapted.msg_type == decode.MSG_DELETE:
            self.dml_messages += 1
            self.dml_bytes += size
        if adapted.kind is wal_adaptor.Kind.TICK and wal.txn is None:
            return   # carries nothing for the vchannel's tables
        ts, at = self._tick
        tick_before = ts if at >= self._first[vchannel] else 0   # only a tick the vchannel read
        payload = value or b""
        self._call(vchannel, lambda r: r.wal(offset, wal, adapted, payload, tick_before))
        router = self._routers.get(vchannel)
        if router is not None and router.needs_ticks and vchannel not in self._failed:
            self._ticked[vchannel] = router

    def _ticked_by(self, ts: int, offset: int) -> None:
        """A TimeTick at ``offset``: the range's last, and a tick for the routers that need every one
        (a router that needs none any more leaves them)."""
        self._tick = (max(ts, self._tick[0]), offset)
        if not self._ticked:
            return
        done = []
        for vchannel, router in self._ticked.items():
            if router.first <= offset:
                self._call(vchannel, lambda r: r.tick(ts, offset))
            if not router.needs_ticks or vchannel in self._failed:
                done.append(vchannel)
        for vchannel in done:
            del self._ticked[vchannel]

    def _call(self, vchannel: str, step: Callable[[VchannelRouter], None]) -> None:
        """``step`` on the vchannel's router (made now if need be); an error fails the vchannel alone."""
        if vchannel in self._failed:
            return
        try:
            step(self._router(vchannel))
        except Exception as e:  # noqa: BLE001 - one vchannel's failure must not stop the others
            self._failed[vchannel] = self._router_error(e)

    def broker_failed(self, message: str, unanswered: bool = False) -> None:
        """The broker could not serve the range (``unanswered``: it did not answer): every vchannel of
        it fails, or waits where it stands for an unanswered range."""
        kind = FailureKind.BROKER_UNREACHABLE if unanswered else FailureKind.BROKER
        self.error = Failure(kind=kind, message=message)

    def finish(self) -> tuple[list[Portion], ReadStats]:
        """The portions of the routed vchannels, and the range's stats (the others' portions: see
        ``ReadStats.idle_portion``)."""
        ts, at = self._tick
        portions = []
        for v, r in sorted(self._routers.items()):
            error = self.error or self._failed.get(v)
            if error is not None:
                portions.append(r.fail(error))
                continue
            first = self._first[v]
            try:
                portions.append(r.finish(ts if at >= first else 0))
            except Exception as e:  # noqa: BLE001 - e.g. a binlog file that cannot be closed
                portions.append(r.fail(self._router_error(e)))
        p = self.piece
        return portions, ReadStats(p.pchannel, p.first, p.end, self.messages, self.bytes, self.dml_messages,
                                   self.dml_bytes, self.error, self.next_position, ts, at, frozenset(self._routers),
                                   p.partition)

    def _router_error(self, e: Exception) -> Failure:
        # Said here, where the exception is: a full filesystem is told apart by its errno, never
        # guessed from a message on the driver.
        return classify(e, kind=FailureKind.ROUTER, where=self.where, step="writing binlogs")
