"""A generation's engine events → per-row text pieces and finish reasons, plus the request's usage.

A row ends with the engine's `Finished`, or earlier when a stop string matched; once every row has
ended the iteration stops, and leaving `start_generation` cancels what the engine still runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal

from engine.api import Finished, Tokens
from handlers.generation.engine_bridge import Generation
from handlers.generation.text_output import Piece, RowText

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class RowEvent:
    row: int
    piece: Piece
    finish: FinishReason | None  # set on the row's last event
    tokens: int  # the row's completion tokens so far, this event's included


@dataclass
class UsageCount:
    """Token counts of one or more requests, as the APIs report them."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0

    def add_rows(self, rows: Sequence[RowText]) -> None:
        self.completion_tokens += sum(row.tokens for row in rows)
        self.reasoning_tokens += sum(row.reasoning_tokens for row in rows)


async def row_events(generation: Generation, rows: Sequence[RowText], usage: UsageCount) -> AsyncIterator[RowEvent]:
    """Drive each row's text pipeline; `usage` gets the cached prompt tokens the engine reports."""
    open_rows = set(range(len(rows)))
    cached_reported = False
    async for event in generation.events():
        if event.row not in open_rows:
            continue
        text = rows[event.row]
        if isinstance(event, Tokens):
            piece = Piece()
            for position, token_id in enumerate(event.token_ids):
                piece.extend(text.push(token_id, event.logprobs[position] if event.logprobs else None))
                if text.stopped:
                    break
            if text.stopped:
                open_rows.discard(event.row)
                yield RowEvent(event.row, piece, "stop", text.tokens)
            elif piece:
                yield RowEvent(event.row, piece, None, text.tokens)
        elif isinstance(event, Finished):
            if not cached_reported:
                usage.cached_tokens += event.usage.cached_prompt_tokens
                cached_reported = True
            open_rows.discard(event.row)
            yield RowEvent(event.row, text.finish(), "length" if event.reason == "length" else "stop", text.tokens)
        if not open_rows:
            return
