"""Per-request volatile lines in a system prompt, dropped before rendering so prefix reuse survives.

Coding agents resend the whole conversation every turn and the engine reuses the KV pages of the
longest prefix it has seen. A line near the top of the system prompt that changes on every
request (Claude Code's `x-anthropic-billing-header: cc_version=…; cch=<hash>;`) makes every
turn's prompt differ from its first tokens on, so every turn would prefill everything again.
Such lines say nothing to a local model, so they are left out of the prompt: turn N+1 then
shares all of turn N's prompt and prefills only the new turn.

The built-in patterns are `BUILT_IN_PATTERNS`; `--volatile-line-pattern` adds one more regular
expression (matched with `re.search` against each line of each system text).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

BUILT_IN_PATTERNS: tuple[str, ...] = (
    # Claude Code 2.x: the first system block, a billing line whose hash changes per request.
    r"^x-anthropic-billing-header:",
)


def volatile_line_pattern(extra: str | None = None) -> re.Pattern[str]:
    """The built-in patterns plus `extra`, as one expression (an invalid `extra` raises re.error)."""
    patterns: Sequence[str] = (*BUILT_IN_PATTERNS, extra) if extra else BUILT_IN_PATTERNS
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns))


def without_volatile_lines(text: str, pattern: re.Pattern[str]) -> str:
    """`text` without the lines `pattern` matches; text without such lines comes back unchanged."""
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if not pattern.search(line.rstrip("\r\n"))]
    return text if len(kept) == len(lines) else "".join(kept).strip("\n")
