"""The embedded Pulsar-protocol broker (pulsar-lite) as DeltaNode will read it (docs/pulsar.md)."""

from __future__ import annotations

import pulsar
import pytest

from deltanode.standalone.services import EmbeddedPulsar
from deltanode.wire.positions import pulsar_ledger_entry, pulsar_msg_id

TOPIC = "persistent://public/default/by-dev-rootcoord-dml_0"


@pytest.fixture
def broker(tmp_path):
    with EmbeddedPulsar(tmp_path / "pulsar") as b:
        yield b


def read_all(client: pulsar.Client, start: pulsar.MessageId) -> list[tuple[int, int, bytes]]:
    """Everything from ``start`` on, with a one-message receiver queue (larger queues make
    pulsar-lite duplicate and skip deliveries)."""
    reader = client.create_reader(TOPIC, start, receiver_queue_size=1, start_message_id_inclusive=True)
    out = []
    try:
        while reader.has_message_available():
            m = reader.read_next(5000)
            out.append((m.message_id().ledger_id(), m.message_id().entry_id(), m.data()))
    finally:
        reader.close()
    return out


def test_ids_are_contiguous_readers_start_at_a_milvus_position_and_topics_survive_a_restart(broker, tmp_path):
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        sent = [producer.send(f"m{i}".encode() * 300) for i in range(2000)]
        assert [(m.ledger_id(), m.entry_id()) for m in sent] == [(0, i) for i in range(2000)]
        assert pulsar_ledger_entry(sent[5].serialize()) == (0, 5)
        everything = read_all(client, pulsar.MessageId.earliest)
        assert everything == [(0, i, f"m{i}".encode() * 300) for i in range(2000)]   # exact: none twice, none lost
        # A reader placed (inclusively: docs/pulsar.md) at a position Milvus wrote, MessageIdData
        # with partition 0 and batch 0, and at the same (ledger, entry) as the topic numbers it.
        ledger, entry = pulsar_ledger_entry(pulsar_msg_id(0, 1990))
        for start in (pulsar.MessageId.deserialize(pulsar_msg_id(0, 1990)), pulsar.MessageId(-1, ledger, entry, -1)):
            assert [e for _, e, _ in read_all(client, start)] == list(range(1990, 2000))
    finally:
        client.close()
    broker.stop()
    restarted = EmbeddedPulsar(tmp_path / "pulsar", broker.port)
    restarted.start()
    try:
        client = pulsar.Client(restarted.service_url)
        assert len(read_all(client, pulsar.MessageId.earliest)) == 2000   # file-backed: kept
        sent = client.create_producer(TOPIC, batching_enabled=False).send(b"after")
        assert (sent.ledger_id(), sent.entry_id()) == (0, 2000)
        client.close()
    finally:
        restarted.stop()


EXIT_SCRIPT = """
import sys
from deltanode.mq.broker import Broker
from deltanode.mq.types import OffsetRange
broker = Broker("pulsar", sys.argv[1])
sender = broker.sender()
sender.produce("by-dev-rootcoord-dml_0", b"x" * 100)
assert sender.flush() == 0
sender.close()
chunks = list(broker.read_ranges([OffsetRange("by-dev-rootcoord-dml_0", 0, 0, 1)]))
assert chunks, "nothing read"
print("read", sum(len(c) for _, c in chunks))
marks = broker.watermarks()   # closed right before the exit: the abort needed a client closed late
assert marks.high("by-dev-rootcoord-dml_0") >= 1
marks.close()
"""


def test_a_process_that_used_the_pulsar_seam_exits_cleanly(broker, tmp_path):
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
        done = subprocess.run([sys.executable, str(script), broker.service_url], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, f"run {run}: rc {done.returncode}\n{done.stderr[-2000:]}"
        assert done.stdout.startswith("read "), done.stdout
