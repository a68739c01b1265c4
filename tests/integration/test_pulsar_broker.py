"""Apache Pulsar, the embedded broker, as DeltaNode reads it (docs/pulsar.md): message ids, readers
placed at Milvus's positions, a full receiver queue delivering each message once and in order, and
topics that survive a SIGKILL of the broker."""

from __future__ import annotations

import os
import signal

import pulsar
import pytest

from deltanode.mq.pulsar import RECEIVER_QUEUE
from deltanode.standalone.pulsar_server import EmbeddedApachePulsar
from deltanode.wire.positions import pulsar_ledger_entry, pulsar_msg_id

TOPIC = "persistent://public/default/by-dev-rootcoord-dml_0"


@pytest.fixture
def broker(tmp_path):
    with EmbeddedApachePulsar(tmp_path / "pulsar") as b:
        yield b


def read_all(client: pulsar.Client, start: pulsar.MessageId) -> list[tuple[int, int, bytes]]:
    """Everything from ``start`` on (inclusive), with DeltaNode's receiver queue."""
    reader = client.create_reader(TOPIC, start, receiver_queue_size=RECEIVER_QUEUE, start_message_id_inclusive=True)
    out = []
    try:
        while reader.has_message_available():
            m = reader.read_next(5000)
            out.append((m.message_id().ledger_id(), m.message_id().entry_id(), m.data()))
    finally:
        reader.close()
    return out


def test_ids_are_contiguous_readers_start_at_a_milvus_position_and_topics_survive_a_sigkill(broker, tmp_path):
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        sent = [producer.send(f"m{i}".encode() * 300) for i in range(2000)]
        ledger = sent[0].ledger_id()
        # One ledger, entries numbered from 0 (the broker allocates the ledger's id).
        assert [(m.ledger_id(), m.entry_id()) for m in sent] == [(ledger, i) for i in range(2000)]
        assert pulsar_ledger_entry(sent[5].serialize()) == (ledger, 5)
        everything = read_all(client, pulsar.MessageId.earliest)
        assert everything == [(ledger, i, f"m{i}".encode() * 300) for i in range(2000)]   # none twice, none lost
        # A reader placed (inclusively: docs/pulsar.md) at a position as Milvus writes it, MessageIdData
        # with partition 0 and batch 0, and at the same (ledger, entry) as the client numbers it.
        at = pulsar_msg_id(ledger, 1990)
        for start in (pulsar.MessageId.deserialize(at), pulsar.MessageId(-1, ledger, 1990, -1)):
            assert [e for _, e, _ in read_all(client, start)] == list(range(1990, 2000))
    finally:
        client.close()
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGKILL)
    broker.proc.wait()
    restarted = EmbeddedApachePulsar(tmp_path / "pulsar", broker.port)
    restarted.start()
    try:
        client = pulsar.Client(restarted.service_url)
        kept = read_all(client, pulsar.MessageId.earliest)
        assert [(at_ledger, entry) for at_ledger, entry, _ in kept] == [(ledger, i) for i in range(2000)]   # all kept
        after = client.create_producer(TOPIC, batching_enabled=False).send(b"after")
        assert after.ledger_id() > ledger   # a restart opens a new ledger: positions jump (docs/pulsar.md)
        client.close()
    finally:
        restarted.stop()


EXIT_SCRIPT = """
import sys
from deltanode.mq.broker import Broker
from deltanode.mq.types import OffsetRange
broker = Broker("pulsar", sys.argv[1])
sender = broker.sender()
sender.produce("exit-check", b"x" * 100)
assert sender.flush() == 0
sender.close()
marks = broker.watermarks()   # closed right before the exit: the abort needed a client closed late
high = marks.high("exit-check")
chunks = [c for _, c in broker.read_ranges([OffsetRange("exit-check", 0, high - 1, high)])]
assert [len(c) for c in chunks] == [1], chunks
print("read", len(chunks[0]))
marks.close()
"""


def test_a_process_that_used_the_pulsar_seam_exits_cleanly(pulsar_server, tmp_path):
    """pulsar-client with a Python logger aborted about half of the exits of such a process
    (SIGABRT at interpreter teardown, a CI failure): each of 10 runs must exit 0, and the
    client's log goes to stderr only, never into stdout."""
    import os
    import subprocess
    import sys
    script = tmp_path / "exit_once.py"
    script.write_text(EXIT_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..", "app")}
    for run in range(10):
        done = subprocess.run([sys.executable, str(script), pulsar_server.service_url], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, f"run {run}: rc {done.returncode}\n{done.stderr[-2000:]}"
        assert done.stdout.startswith("read "), done.stdout


def test_ranges_of_many_topics_read_exactly_with_readers_opened_ahead_and_closed_when_the_caller_stops(pulsar_server):
    from deltanode.mq import pulsar as source
    from deltanode.mq.broker import Broker
    from deltanode.mq.types import Chunk, OffsetRange
    broker = Broker("pulsar", pulsar_server.service_url)
    sender = broker.sender()
    topics = [f"ahead-{k}" for k in range(3 * source.OPEN_AHEAD)]
    for k, topic in enumerate(topics):
        for n in range(20):
            sender.produce(topic, f"{k}:{n}".encode())
    assert sender.flush() == 0
    sender.close()
    marks = broker.watermarks()
    try:
        highs = {t: marks.high(t) for t in topics}
    finally:
        marks.close()
    ranges = [OffsetRange(t, 0, highs[t] - 15, highs[t] - 5) for t in topics]   # messages 5..14 of each
    got: dict[int, list[bytes]] = {}
    for i, chunk in broker.read_ranges(ranges):
        assert isinstance(chunk, list), chunk
        got.setdefault(i, []).extend(payload for _, payload, _ in chunk)
    assert got == {k: [f"{k}:{n}".encode() for n in range(5, 15)] for k in range(len(topics))}
    # A caller that stops after the first chunk: the readers opened ahead of it are closed with it.
    client = source.client(pulsar_server.service_url)
    before = len(client._consumers)
    reads = broker.read_ranges(ranges)
    first: Chunk = next(reads)[1]   # type: ignore[assignment]
    assert [p for _, p, _ in first] == [f"0:{n}".encode() for n in range(5, 15)]
    reads.close()
    assert len(client._consumers) == before
