#!/usr/bin/env python3
"""Record the classes the embedded Apache Pulsar loads at start in a class data sharing archive.

``build/pulsar_cds.py``: starts ``EmbeddedApachePulsar`` on a scratch directory with
``-XX:ArchiveClassesAtExit``, creates a producer and a reader as DeltaNode's clients do, and
stops it; the JVM writes the archive as it exits, beside the Pulsar jars
(``pulsar_server.class_archive``). ``build/bootstrap.sh`` runs this once per set of Pulsar jars.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "app")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="build/pulsar_cds.py", description=__doc__.split("\n\n")[0])
    p.parse_args(argv)
    sys.path.insert(0, os.path.abspath(APP))
    import pulsar

    from deltanode.standalone.pulsar_server import EmbeddedApachePulsar, class_archive

    archive = class_archive()
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="deltanode-pulsar-cds-") as scratch:
        broker = EmbeddedApachePulsar(scratch, jvm_options=(f"-XX:ArchiveClassesAtExit={partial}",))
        broker.stop_timeout = 120.0   # writing the archive takes a while after the stop
        with broker:
            client = pulsar.Client(broker.service_url, logger=pulsar.FileLogger(pulsar.LoggerLevel.Error,
                                                                                os.devnull))
            topic = "persistent://public/default/deltanode-cds"
            sent = client.create_producer(topic).send(b"x")
            client.create_reader(topic, sent, receiver_queue_size=10, start_message_id_inclusive=True).read_next(10000)
            client.close()
    if not partial.is_file():
        print(f"build/pulsar_cds.py: the JVM wrote no archive ({partial})", file=sys.stderr)
        return 1
    os.replace(partial, archive)
    print(f"build/pulsar_cds.py: {archive} ({archive.stat().st_size >> 20} MiB) in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
