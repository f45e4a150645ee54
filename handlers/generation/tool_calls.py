"""Tool calls in the model's own syntax, parsed incrementally: one parser per format, in a registry.

A parser takes the answer text piece by piece and returns what is plain content and which calls
completed. A call is emitted whole, once its closing syntax arrived and its JSON parsed, so a
streamed answer's call deltas concatenate to exactly the non-streamed answer's calls; anything
that does not parse as a call (malformed JSON, an unterminated call) stays in the content as
text. Whitespace around calls is dropped, on both paths alike.

Each format also says how to wrap a call for the grammar that forces one (`tool_choice` required
or a named function), so the forced call is in the syntax the parser reads.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from handlers.generation.text_scan import partial_tail


@dataclass(frozen=True)
class ToolCall:
    index: int  # position among the answer's calls
    id: str
    name: str
    arguments: str  # a JSON object, as text


@dataclass
class Parsed:
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)


class ToolCallParser(Protocol):
    def push(self, text: str) -> Parsed: ...

    def finish(self) -> Parsed:
        """The end of the answer: whatever is held back, as content or calls."""
        ...


@dataclass(frozen=True)
class ToolCallFormat:
    name: str
    parser: Callable[[], ToolCallParser]
    # Lark for the forced calls, given the Lark rule name of one call's JSON and whether several may follow.
    forced_calls_lark: Callable[[str, bool], str]


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def call_from_json(text: str, index: int) -> ToolCall | None:
    """`{"name": …, "arguments": {…}}` (or `parameters`, as Llama writes it) → a call, else None."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments: Any = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(index, new_call_id(), value["name"], json.dumps(arguments, ensure_ascii=False))


class _ContentWithoutEdgeSpace:
    """Content whose whitespace is held until text follows, so the whitespace next to a call
    (and at the end of an answer with calls) is dropped however the text was cut into pieces."""

    def __init__(self) -> None:
        self._space = ""
        self._after_call = False

    def add(self, text: str) -> str:
        combined = self._space + text
        body = combined.rstrip()
        self._space = combined[len(body) :]
        if self._after_call:
            body = body.lstrip()
            self._after_call = not body
        return body

    def call_made(self) -> None:
        self._space = ""
        self._after_call = True

    def end(self, had_calls: bool) -> str:
        space, self._space = self._space, ""
        return "" if had_calls else space


class HermesParser:
    """`<tool_call>{"name": …, "arguments": {…}}</tool_call>`: Hermes, Qwen2.5/Qwen3, and pooled's
    own system-prompt format for templates without tools."""

    OPEN = "<tool_call>"
    CLOSE = "</tool_call>"

    def __init__(self) -> None:
        self._buffer = ""
        self._in_call = False
        self._calls = 0
        self._content = _ContentWithoutEdgeSpace()

    def push(self, text: str) -> Parsed:
        self._buffer += text
        parsed = Parsed()
        while True:
            if self._in_call:
                end = self._buffer.find(self.CLOSE)
                if end < 0:
                    return parsed
                body, self._buffer = self._buffer[:end], self._buffer[end + len(self.CLOSE) :]
                self._in_call = False
                call = call_from_json(body, self._calls)
                if call is None:
                    parsed.content += self._content.add(self.OPEN + body + self.CLOSE)
                else:
                    self._calls += 1
                    self._content.call_made()
                    parsed.calls.append(call)
            else:
                start = self._buffer.find(self.OPEN)
                if start >= 0:
                    parsed.content += self._content.add(self._buffer[:start])
                    self._buffer = self._buffer[start + len(self.OPEN) :]
                    self._in_call = True
                    continue
                keep = partial_tail(self._buffer, (self.OPEN,))
                parsed.content += self._content.add(self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep :]
                return parsed

    def finish(self) -> Parsed:
        unfinished = (self.OPEN if self._in_call else "") + self._buffer
        self._buffer, self._in_call = "", False
        content = self._content.add(unfinished) if unfinished else ""
        return Parsed(content=content + self._content.end(self._calls > 0))


def hermes_forced_calls(call_rule: str, parallel: bool) -> str:
    more = f' ("\\n" "<tool_call>\\n" {call_rule} "\\n</tool_call>")*' if parallel else ""
    return f'start: "<tool_call>\\n" {call_rule} "\\n</tool_call>"{more}'


class JsonCallParser:
    """Llama 3.x's JSON tool calls: the whole answer is `{"name": …, "parameters": {…}}` (several
    separated by `;`). An answer that opens with `{` is held until its end, then read as calls or,
    failing that, as text; any other answer streams as content."""

    def __init__(self) -> None:
        self._held: str | None = ""  # None once the answer is known to be plain content

    def push(self, text: str) -> Parsed:
        if self._held is None:
            return Parsed(content=text)
        self._held += text
        stripped = self._held.lstrip()
        if not stripped or stripped.startswith("{"):
            return Parsed()
        content, self._held = self._held, None
        return Parsed(content=content)

    def finish(self) -> Parsed:
        held, self._held = self._held, None
        if not held:
            return Parsed()
        calls = _json_calls(held)
        return Parsed(calls=calls) if calls else Parsed(content=held)


def _json_calls(text: str) -> list[ToolCall]:
    """`{…}; {…}` → calls, or [] unless every part is a call."""
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    position = len(text) - len(text.lstrip())
    while position < len(text):
        try:
            _, end = decoder.raw_decode(text, position)
        except ValueError:
            return []
        call = call_from_json(text[position:end], len(calls))
        if call is None:
            return []
        calls.append(call)
        position = end
        while position < len(text) and text[position] in " \t\r\n;":
            position += 1
    return calls


def json_forced_calls(call_rule: str, parallel: bool) -> str:
    more = f' (";" {call_rule})*' if parallel else ""
    return f"start: {call_rule}{more}"


FORMATS: dict[str, ToolCallFormat] = {
    "hermes": ToolCallFormat("hermes", HermesParser, hermes_forced_calls),
    "llama3_json": ToolCallFormat("llama3_json", JsonCallParser, json_forced_calls),
}
