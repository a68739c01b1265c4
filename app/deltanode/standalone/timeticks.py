"""The standalone's rootcoord stand-in: a TimeTick on every pchannel every ``interval``.

Milvus's rootcoord writes a TimeTick on every DML pchannel about every 200 ms
(docs/milvus-facts.md §3); a vchannel's checkpoint timestamp, and so a flush
(``admin flush``), moves only with them. A standalone run has no rootcoord, so this thread
writes them. Its ticks lag the clock by ``lag``: a tick at ts T promises that every message
with ts <= T was written before it, and a standalone's producers (``admin produce``, a
client's proxy) are other processes taking timestamps from their own clocks: the lag covers a
message written up to that long after its timestamp was taken. Against a real Milvus, its
rootcoord ticks instead: the ``datanode`` subcommand has no ticker.
"""

from __future__ import annotations

import logging
import threading
import time

from ..mq.broker import Broker
from ..wire.milvus_proto import common_pb2, msg_pb2
from ..wire.positions import compose_ts

log = logging.getLogger(__name__)


def time_tick(ts: int) -> bytes:
    return msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick, timestamp=ts,
                                                       sourceID=0)).SerializeToString()


class TimeTicker:
    """Runs on the driver, in a thread of its own."""

    def __init__(self, broker: Broker, pchannels: list[str], interval: float, lag: float = 1.0) -> None:
        self.broker, self.pchannels, self.interval, self.lag = broker, pchannels, interval, lag
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="standalone-timeticks", daemon=True)

    def start(self) -> TimeTicker:
        self._thread.start()
        return self

    def _run(self) -> None:
        sender = self.broker.sender()
        failing = False
        try:
            while not self._stop.wait(self.interval):
                payload = time_tick(compose_ts(int((time.time() - self.lag) * 1000)))
                try:
                    for pchannel in self.pchannels:
                        sender.produce(pchannel, payload)
                    sender.flush(self.interval * 5)
                    failing = False
                except Exception as e:  # noqa: BLE001 - the broker may be restarting: tick again next time
                    if not failing:
                        log.warning("TimeTicks could not be written (%s); trying every %.1f s", e, self.interval)
                    failing = True
        finally:
            sender.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
