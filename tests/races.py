"""Writers racing for one ``txn`` step of a Delta log, each from its own view of the table:
shared by the commit-protocol tests on a filesystem and on S3."""

from __future__ import annotations

import threading

from deltanode.delta.delta_log import DeltaLog, TxnMoved


def race_for_one_step(logs: list[DeltaLog], app: str, at: int) -> list[str]:
    """Every log commits ``app`` from ``at`` to ``at + 1`` at once; their outcomes, sorted."""
    outcomes = []

    def race(log: DeltaLog) -> None:
        try:
            log.commit(txns={app: at + 1}, expected={app: at}, info={})
            outcomes.append("won")
        except TxnMoved:
            outcomes.append("refused")

    threads = [threading.Thread(target=race, args=(log,)) for log in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(outcomes)
