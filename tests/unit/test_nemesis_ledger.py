"""The nemesis's ledger and its comparison (pure logic): Milvus's rules for the model's current
state, and a duplicated, unknown or lost row each counted and named."""

from __future__ import annotations

import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "build"))

from deltanode_nemesis.ledger import CollectionLedger
from deltanode_nemesis.verdict import CollectionVerdict, compare

C = collections.Counter


def test_the_model_applies_deletes_to_older_rows_and_keeps_each_keys_newest():
    ledger = CollectionLedger(inserts=[(1, 10), (2, 11), (3, 12), (2, 20)],   # key 2 upserted at 20
                              deletes=[(2, 20), (3, 30), (1, 5)])              # key 1's delete predates it
    assert ledger.current() == C({(1, 10): 1, (2, 20): 1})


def verdict(broker, delta, model, current) -> CollectionVerdict:
    v = CollectionVerdict(name="c")
    compare(v, broker=C(broker), delta=C(delta), model=C(model), current=C(current))
    return v


def test_equal_multisets_pass():
    rows = [(1, 10), (2, 11)]
    assert verdict(rows, rows, rows, rows).ok


def test_a_row_committed_twice_is_a_duplicate_even_when_the_keys_match():
    v = verdict([(1, 10), (2, 11)], [(1, 10), (2, 11), (2, 11)], [(1, 10), (2, 11)], [(1, 10), (2, 11)])
    assert not v.ok and v.duplicated == 1 and v.unknown == 0 and "(2, 11)" in v.problems[0]


def test_a_row_the_broker_never_held_and_a_lost_one_are_named():
    v = verdict([(1, 10), (2, 11)], [(1, 10), (3, 12)], [(1, 10), (2, 11)], [(1, 10), (3, 12)])
    assert v.unknown == 1 and v.lost == 1 and v.extra_current == 1
    assert "(2, 11)" in v.problems[0] and "(3, 12)" in v.problems[1]


def test_a_deleted_row_compaction_dropped_is_not_lost():
    v = verdict([(1, 10), (2, 11)], [(1, 10)], [(1, 10)], [(1, 10)])
    assert v.ok
