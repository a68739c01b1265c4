"""The multiset comparison the no-loss, no-duplicate tests rely on: a second copy of a row fails and
names its key, where a dict keyed by primary key would have let it pass."""

import pytest

from ..row_multisets import assert_same_keys, assert_same_rows, diff_rows

ROWS = [{"id": i, "note": f"note {i}", "vec": [float(i), 0.5]} for i in range(5)]


def test_equal_rows_in_any_order_pass():
    assert_same_rows(ROWS, list(reversed(ROWS)), key="id", what="current rows")


def test_a_row_held_twice_fails_and_names_its_key():
    twice = [*ROWS, dict(ROWS[3])]
    assert {r["id"]: r for r in twice} == {r["id"]: r for r in ROWS}   # what a dict keyed by pk would see
    with pytest.raises(AssertionError) as failed:
        assert_same_rows(ROWS, twice, key="id", what="sharded's current rows")
    said = str(failed.value)
    assert "sharded's current rows: 6 rows found, 5 expected" in said
    assert "1 key(s) found more often than expected: id 3 (2 rows, 1 expected)" in said, said


def test_missing_unknown_and_differing_rows_are_named_by_kind():
    found = [ROWS[0], ROWS[1], {**ROWS[2], "note": "changed"}, {"id": 9, "note": "new", "vec": [9.0, 0.5]}]
    diff = diff_rows(ROWS, found, key="id")
    assert sorted(diff.extra) == [2, 9] and sorted(diff.missing) == [2, 3, 4]
    said = diff.report(what="t", key="id")
    assert "2 key(s) missing: id 3 (0 rows, 1 expected); id 4 (0 rows, 1 expected)" in said, said
    assert "1 key(s) never expected: id 9 (1 rows)" in said, said
    assert "1 key(s) with other values: id 2: expected" in said and "'note': 'changed'" in said, said


def test_each_version_of_a_key_counts_once():
    """An upsert inserts a new version of a key: both versions are expected in the insert table, each
    once; a second copy of either is found, and so is a version missing."""
    versions = [*ROWS, {**ROWS[1], "note": "note 1 v1"}]
    assert_same_rows(versions, list(reversed(versions)), key="id", what="insert table")
    with pytest.raises(AssertionError, match=r"found more often than expected: id 1 \(3 rows, 2 expected\)"):
        assert_same_rows(versions, [*versions, versions[-1]], key="id", what="insert table")
    with pytest.raises(AssertionError, match=r"missing: id 1 \(1 rows, 2 expected\)"):
        assert_same_rows(versions, versions[:-1], key="id", what="insert table")


def test_rows_that_may_be_absent_are_not_missing_but_a_copy_of_them_still_fails():
    deleted = {1, 2}
    found = [r for r in ROWS if r["id"] not in deleted]
    assert_same_rows(ROWS, found, key="id", what="t", may_lack=lambda r: r["id"] in deleted)
    with pytest.raises(AssertionError, match=r"missing: id 3"):
        assert_same_rows(ROWS, [r for r in found if r["id"] != 3], key="id", what="t",
                         may_lack=lambda r: r["id"] in deleted)
    with pytest.raises(AssertionError, match=r"found more often than expected: id 0 \(2 rows, 1 expected\)"):
        assert_same_rows(ROWS, [*found, ROWS[0]], key="id", what="t", may_lack=lambda r: r["id"] in deleted)


def test_keys_are_counted():
    produced = [*range(1, 101), *range(1, 11)]   # a second run numbers its keys from 1 again
    assert_same_keys(produced, list(reversed(produced)), what="pk")
    with pytest.raises(AssertionError, match=r"found more often than expected: key 50 \(2 rows, 1 expected\)"):
        assert_same_keys(produced, [*produced, 50], what="pk")
    with pytest.raises(AssertionError, match=r"missing: key 7 \(1 rows, 2 expected\)"):
        assert_same_keys(produced, [k for i, k in enumerate(produced) if i != 106], what="pk")
    assert sorted(set([*produced, 50])) == sorted(set(produced))   # what a set would see
