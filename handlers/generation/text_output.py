"""One row's generated tokens → text pieces: detokenized, cut at stop strings, split into reasoning,
content and tool calls. Each API shapes the pieces into its own answer or stream events.

The order matters: stop strings are matched on the whole text the model wrote (as OpenAI does),
then the reasoning is split off, then calls are read from the answer. A streamed answer is the
concatenation of the pieces and a non-streamed one is built from the very same pieces, so both
are equal by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.api import TokenLogprob
from handlers.generation.prompt import ChatPrompt
from handlers.generation.reasoning import ReasoningSplitter, Split
from handlers.generation.stop_strings import StopStringMatcher
from handlers.generation.tool_calls import CallFragment, Parsed, ToolCall, ToolCallParser
from text import IncrementalDetokenizer, Tokenizer


@dataclass
class Piece:
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)  # the calls this piece completed
    call_fragments: list[CallFragment] = field(default_factory=list)  # calls as they stream
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of the tokens this piece consumed

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.call_fragments or self.logprobs)

    def extend(self, other: Piece) -> None:
        self.reasoning += other.reasoning
        self.content += other.content
        self.tool_calls += other.tool_calls
        self.call_fragments += other.call_fragments
        self.logprobs += other.logprobs


class RowText:
    """The text pipeline of one row. `push` each token; `finish` once the row ends."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        stops: Sequence[str] = (),
        reasoning: ReasoningSplitter | None = None,
        tool_parser: ToolCallParser | None = None,
    ) -> None:
        self._detokenizer = IncrementalDetokenizer(tokenizer, skip_special_tokens=True)
        self._stops = StopStringMatcher(stops)
        self._reasoning = reasoning
        self._tool_parser = tool_parser
        self.tokens = 0
        self.reasoning_tokens = 0
        self.tool_calls = 0

    @property
    def stopped(self) -> bool:
        """A stop string matched: the row's answer is complete, later tokens are not part of it."""
        return self._stops.matched is not None

    @property
    def stop_string(self) -> str | None:
        """The stop string that ended the row, if one did."""
        return self._stops.matched

    def push(self, token_id: int, logprob: TokenLogprob | None = None) -> Piece:
        if self.stopped:
            return Piece()
        self.tokens += 1
        if self._reasoning is not None and self._reasoning.in_reasoning:
            self.reasoning_tokens += 1
        piece = self._route(self._stops.push(self._detokenizer.push(token_id)))
        if logprob is not None:
            piece.logprobs.append(logprob)
        if self.stopped:
            piece.extend(self._drain())
        return piece

    def finish(self) -> Piece:
        """Whatever is held back; call once, when the row has ended (not needed after a stop string)."""
        if self.stopped:
            return Piece()
        piece = self._route(self._stops.push(self._detokenizer.flush()))
        piece.extend(self._route(self._stops.flush()))
        piece.extend(self._drain())
        return piece

    def _drain(self) -> Piece:
        piece = Piece()
        if self._reasoning is not None:
            piece.extend(self._parse(self._reasoning.flush()))
        if self._tool_parser is not None:
            piece.extend(self._calls(self._tool_parser.finish()))
        return piece

    def _route(self, text: str) -> Piece:
        if not text:
            return Piece()
        split = self._reasoning.push(text) if self._reasoning is not None else Split(content=text)
        return self._parse(split)

    def _parse(self, split: Split) -> Piece:
        if self._tool_parser is None or not split.content:
            return Piece(reasoning=split.reasoning, content=split.content)
        piece = self._calls(self._tool_parser.push(split.content))
        piece.reasoning = split.reasoning
        return piece

    def _calls(self, parsed: Parsed) -> Piece:
        self.tool_calls += len(parsed.calls)
        return Piece(content=parsed.content, tool_calls=parsed.calls, call_fragments=parsed.fragments)


def chat_row_text(tokenizer: Tokenizer, prompt: ChatPrompt, stops: Sequence[str], parses_calls: bool) -> RowText:
    """A row's pipeline for a chat answer: reasoning split when the model thinks, calls when tools are offered."""
    return RowText(
        tokenizer,
        stops,
        reasoning=ReasoningSplitter(prompt.starts_in_reasoning) if prompt.thinks else None,
        tool_parser=prompt.tool_format.parser() if parses_calls else None,
    )
