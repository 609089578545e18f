"""What one of our rules is: a `Detector` (an RE2 pattern) and the `Judge` that confirms it.

A pattern captures the region that holds the secret (`secret_group`) and, for assignments, the key
that names it (`key_group`). The judge gets both and returns the kind plus the secret's span
inside the region (`Judged`), or None. `strip_quotes` is the value span most judges start from.
The judges live in positions.py and judges.py, the ordered table in detectors.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Judged = tuple[str, int, int] | None
Judge = Callable[[str, str | None], Judged]


@dataclass(frozen=True, slots=True)
class Detector:
    """A secret format: where it is (pattern) and whether a candidate really is one (judge)."""

    name: str
    pattern: str
    judge: Judge
    secret_group: int = 0
    key_group: int | None = None
    # detectors of one lane share an RE2 pass; keyed patterns in the same DFA as prefixed tokens
    # multiply its states, so they get passes of their own (lower lanes win ties)
    lane: int = 0


# what a value's end is trimmed of: closing quotes, backslashes, `,`, `;`, `)`
VALUE_TRAIL = "\\\"'`,;)"


def strip_quotes(region: str) -> tuple[int, int, bool]:
    """The span of a value inside `\\"value`, `'value`, `` `value `` or `value` and whether quoted."""
    lo = 0
    while lo < len(region) and region[lo] == "\\":
        lo += 1
    quoted = lo < len(region) and region[lo] in "\"'`"
    while lo < len(region) and region[lo] in "\\\"'`":
        lo += 1
    hi = len(region)
    while hi > lo and region[hi - 1] in VALUE_TRAIL:
        hi -= 1
    return lo, hi, quoted
