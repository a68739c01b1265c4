"""Rows compared as multisets, for the tests that claim no row lost and none written twice.

Every found row is counted: rows are grouped by key and matched one for one with the expected
rows of that key (by ``==``, whole row), never collected into a dict keyed by primary key, where a
second copy of a row would replace the first and pass unseen. A key may carry several expected
rows (the versions an upsert inserts); each must be found exactly as often as it was expected. A
difference is reported by key: a key found more often than expected (a duplicate), a key never
expected, a key missing, a key whose values differ."""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

EXAMPLES = 5   # keys named per kind of difference


@dataclass(frozen=True, kw_only=True)
class RowDiff:
    """``found`` against ``expected``, key by key: the found rows no expected row accounts for,
    the expected rows not found, and how many rows of each key either side holds. Runs in the
    test process."""

    extra: dict[Hashable, list[dict]]
    missing: dict[Hashable, list[dict]]
    expected_counts: collections.Counter
    found_counts: collections.Counter

    def __bool__(self) -> bool:
        return bool(self.extra or self.missing)

    def report(self, *, what: str, key: str) -> str:
        """One line a kind of difference, each naming its first keys."""
        twice, unknown, differ, lost = [], [], [], []
        for k in sorted(self.extra.keys() | self.missing.keys(), key=repr):
            if k in self.extra and k in self.missing:
                differ.append(f"{key} {k!r}: expected {self.missing[k][0]}, found {self.extra[k][0]}")
            elif k in self.extra and self.expected_counts[k]:
                twice.append(f"{key} {k!r} ({self.found_counts[k]} rows, {self.expected_counts[k]} expected)")
            elif k in self.extra:
                unknown.append(f"{key} {k!r} ({self.found_counts[k]} rows)")
            else:
                lost.append(f"{key} {k!r} ({self.found_counts[k]} rows, {self.expected_counts[k]} expected)")
        lines = [f"{what}: {sum(self.found_counts.values())} rows found, {sum(self.expected_counts.values())} "
                 f"expected"]
        for label, items in (("found more often than expected", twice), ("never expected", unknown),
                             ("missing", lost), ("with other values", differ)):
            if items:
                lines.append(f"  {len(items)} key(s) {label}: " + "; ".join(items[:EXAMPLES]))
        return "\n".join(lines)


def diff_rows(expected: Iterable[dict], found: Iterable[dict], *, key: str,
              may_lack: Callable[[dict], bool] | None = None) -> RowDiff:
    """Each expected row matched with one equal found row of its key; what is left over on either
    side. Expected rows for which ``may_lack`` is true may be absent (they are not reported
    missing); a found row beyond the expected ones is reported all the same."""
    want: dict[Hashable, list[dict]] = collections.defaultdict(list)
    got: dict[Hashable, list[dict]] = collections.defaultdict(list)
    for row in expected:
        want[row[key]].append(row)
    for row in found:
        got[row[key]].append(row)
    extra, missing = {}, {}
    for k in want.keys() | got.keys():
        left = list(got.get(k, ()))
        unmatched = []
        for row in want.get(k, ()):
            at = next((i for i, f in enumerate(left) if f == row), None)
            if at is None:
                unmatched.append(row)
            else:
                del left[at]
        unmatched = [r for r in unmatched if may_lack is None or not may_lack(r)]
        if left:
            extra[k] = left
        if unmatched:
            missing[k] = unmatched
    return RowDiff(extra=extra, missing=missing,
                   expected_counts=collections.Counter({k: len(v) for k, v in want.items()}),
                   found_counts=collections.Counter({k: len(v) for k, v in got.items()}))


def assert_same_rows(expected: Iterable[dict], found: Iterable[dict], *, key: str, what: str,
                     may_lack: Callable[[dict], bool] | None = None) -> None:
    """``found`` holds each expected row exactly as often as ``expected`` does, and nothing else
    (``may_lack``: expected rows that may be absent)."""
    diff = diff_rows(expected, found, key=key, may_lack=may_lack)
    assert not diff, diff.report(what=what, key=key)


def assert_same_keys(expected: Iterable[Hashable], found: Iterable[Hashable], *, what: str) -> None:
    """``found`` holds each key exactly as often as ``expected`` does (keys alone, no values)."""
    want, got = collections.Counter(expected), collections.Counter(found)
    if want != got:
        diff = diff_rows(({"key": k} for k, n in want.items() for _ in range(n)),
                         ({"key": k} for k, n in got.items() for _ in range(n)), key="key")
        raise AssertionError(diff.report(what=what, key="key"))
