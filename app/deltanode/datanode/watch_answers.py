"""A DataNode's answers to its channel watch keys, many to one etcd transaction (driver).

An answer is a compare-version-and-swap of the vchannel's key (MEP 7). Each is a write that
etcd makes durable before it replies, so answers written one by one, from the watchers'
threads, cost a transaction and its disk sync each, and a node handed 10,000 new vchannels at
once spends most of its watchers' time waiting on etcd (docs/platform.md, "etcd 3.4 (channel
watches and hand-outs)"). The answers waiting at a moment therefore go out together: one
transaction comparing every key's version, and when one key moved meanwhile (the coordinator
took it back), each answer of that batch alone, so that only that one fails.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from deltanode.etcd.client import EtcdClient
from deltanode.etcd.errors import EtcdError

MAX_BATCH = 64   # etcd refuses a transaction of more than 128 compares or puts (--max-txn-ops)


@dataclass(eq=False)
class _Answer:
    key: str
    version: int
    value: bytes
    done: threading.Event = field(default_factory=threading.Event)
    swapped: bool = False
    error: EtcdError | None = None


class WatchAnswers:
    """Runs on the driver: ``swap`` from any thread, the writes on a thread of its own."""

    def __init__(self, client: EtcdClient, name: str) -> None:
        self._client, self._name = client, name
        self._waiting: deque[_Answer] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def swap(self, key: str, version: int, value: bytes) -> bool:
        """Write ``value`` to ``key`` if its version is still ``version``; False when it moved.
        Blocks until written; raises ``EtcdError`` as the client would."""
        answer = _Answer(key, version, value)
        with self._cond:
            closed = self._closed
            if not closed:
                self._waiting.append(answer)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
                self._cond.notify()
        if closed:
            self._write([answer])
        else:
            answer.done.wait()
        return self._result(answer)

    @staticmethod
    def _result(answer: _Answer) -> bool:
        if answer.error is not None:
            raise answer.error
        return answer.swapped

    def close(self) -> None:
        """End the writer thread once what is waiting is written (later swaps still go out, one by one)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._waiting) or self._closed)
                if not self._waiting:
                    return
                batch = [self._waiting.popleft() for _ in range(min(MAX_BATCH, len(self._waiting)))]
            self._write(batch)

    def _write(self, batch: list[_Answer]) -> None:
        try:
            if len(batch) > 1:
                try:
                    if self._client.compare_versions_and_swap({a.key: (a.version, a.value) for a in batch}):
                        for a in batch:
                            a.swapped = True
                        return
                except EtcdError:
                    pass   # each answer alone below: each gets its own error, or goes through
            for a in batch:
                try:
                    a.swapped = self._client.compare_version_and_swap(a.key, a.version, a.value)
                except EtcdError as e:
                    a.error = e
        finally:
            for a in batch:
                a.done.set()
