"""Stop strings: validated up front, matched on the incremental text, never part of the output.

The limits bound the work per token: each string is checked against the text at every generated token, so
their number and size are bounded. More than `MAX_STOP_STRINGS` are clamped to the first ones
(documented in the spec); an over-long string or total is a 400.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers.api_error import ApiError
from handlers.generation.text_scan import partial_tail

MAX_STOP_STRINGS = 16
MAX_STOP_STRING_BYTES = 1024
MAX_STOP_TOTAL_BYTES = 4096


def stop_strings(value: str | Sequence[str] | None, param: str = "stop") -> tuple[str, ...]:
    """The request's stop strings, clamped and checked; empty strings are dropped (they would stop at once)."""
    strings = [value] if isinstance(value, str) else list(value or [])
    kept = tuple(s for s in strings if s)[:MAX_STOP_STRINGS]
    for index, text in enumerate(kept):
        if len(text.encode()) > MAX_STOP_STRING_BYTES:
            raise ApiError(
                400,
                f"Stop string {index} is {len(text.encode())} bytes; at most {MAX_STOP_STRING_BYTES} are allowed.",
                code="stop_too_long",
                param=param,
            )
    total = sum(len(text.encode()) for text in kept)
    if total > MAX_STOP_TOTAL_BYTES:
        raise ApiError(
            400,
            f"The stop strings total {total} bytes; at most {MAX_STOP_TOTAL_BYTES} are allowed.",
            code="stop_too_long",
            param=param,
        )
    return kept


class StopStringMatcher:
    """Feeds text through, holding back any tail that could still become a stop string.

    `push` returns the text that is safe to emit; once a stop string is complete, `matched` is set,
    the text before it is the last returned, and everything after is dropped.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._held = ""
        self.matched: str | None = None

    def push(self, text: str) -> str:
        if self.matched is not None:
            return ""
        buffer = self._held + text
        first = min(
            ((index, stop) for stop in self._stops if (index := buffer.find(stop)) >= 0),
            default=None,
        )
        if first is not None:
            self.matched = first[1]
            self._held = ""
            return buffer[: first[0]]
        keep = partial_tail(buffer, self._stops)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """The held-back tail, once generation has ended without completing a stop string."""
        held, self._held = self._held, ""
        return held
