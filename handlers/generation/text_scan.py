"""The one scanning rule every incremental text parser here needs."""

from __future__ import annotations

from collections.abc import Iterable


def partial_tail(text: str, needles: Iterable[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `needles`.

    That much text must be held back: the next piece may complete the needle.
    """
    longest = 0
    for needle in needles:
        for size in range(min(len(needle) - 1, len(text)), longest, -1):
            if text.endswith(needle[:size]):
                longest = size
                break
    return longest
