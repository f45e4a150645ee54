"""Tool calls in the model's own syntax, parsed incrementally: one parser per format, in a registry.

A parser takes the answer text piece by piece and returns what is plain content, the calls that
completed, and the fragments of calls as they grow (`CallFragment`, what a stream sends). A Hermes
call whose JSON opens `{"name": "…", "arguments": {` streams its arguments as the model writes
them: the call opens once its name is read, each piece adds the arguments' text so far, and the
call is complete when its object closes; its `arguments` are that text, as the model wrote it, so
the fragments concatenate to the final call's arguments on the streamed and the whole path alike.
Such a call stands even if what follows its arguments is malformed or missing. Any other call
(another key order, arguments as a string, Llama's JSON calls, which are held to the answer's
end) is read whole once its closing syntax arrived and is sent in one fragment; one that does not
parse stays in the content as text. Whitespace around calls is dropped, on both paths alike.

Each format also says how to wrap a call for the grammar that forces one (`tool_choice` required
or a named function), so the forced call is in the syntax the parser reads.
"""

from __future__ import annotations

import json
import re
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


@dataclass(frozen=True)
class CallFragment:
    """A piece of a call as it streams: the first opens it (its id and name known), each adds
    `arguments` text, and the one that `closes` it completes the call."""

    index: int
    id: str
    name: str
    arguments: str
    opens: bool
    closes: bool


@dataclass
class Parsed:
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    fragments: list[CallFragment] = field(default_factory=list)

    def add_call(self, call: ToolCall) -> None:
        """A call read whole: complete, and sent in one fragment."""
        self.calls.append(call)
        self.fragments.append(CallFragment(call.index, call.id, call.name, call.arguments, True, True))


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
        self._call: _StreamedCall | None = None  # the call being read, once `OPEN` came
        self._calls = 0
        self._content = _ContentWithoutEdgeSpace()

    def push(self, text: str) -> Parsed:
        self._buffer += text
        parsed = Parsed()
        while True:
            if self._call is not None:
                end = self._buffer.find(self.CLOSE)
                if end < 0:  # what may be the closing tag's start is not read as arguments yet
                    self._call.read(
                        self._buffer[: len(self._buffer) - partial_tail(self._buffer, (self.CLOSE,))], parsed
                    )
                    return parsed
                self._call.read(self._buffer[:end], parsed)
                body, self._buffer = self._buffer[:end], self._buffer[end + len(self.CLOSE) :]
                self._end_call(body, parsed)
            else:
                start = self._buffer.find(self.OPEN)
                if start >= 0:
                    parsed.content += self._content.add(self._buffer[:start])
                    self._buffer = self._buffer[start + len(self.OPEN) :]
                    self._call = _StreamedCall(self._calls)
                    continue
                keep = partial_tail(self._buffer, (self.OPEN,))
                parsed.content += self._content.add(self._buffer[: len(self._buffer) - keep])
                self._buffer = self._buffer[len(self._buffer) - keep :]
                return parsed

    def finish(self) -> Parsed:
        parsed = Parsed()
        if self._call is not None and self._call.opened:
            self._end_call(self._buffer, parsed)
            self._buffer = ""
        unfinished = (self.OPEN if self._call is not None else "") + self._buffer
        self._buffer, self._call = "", None
        parsed.content += self._content.add(unfinished) if unfinished else ""
        parsed.content += self._content.end(self._calls > 0)
        return parsed

    def _end_call(self, body: str, parsed: Parsed) -> None:
        """The call's body is complete (its closing tag, or the answer's end once it streams)."""
        streamed, self._call = self._call, None
        assert streamed is not None
        if streamed.opened:
            parsed.calls.append(streamed.finish(parsed))
        else:
            call = call_from_json(body, self._calls)
            if call is None:
                parsed.content += self._content.add(self.OPEN + body + self.CLOSE)
                return
            parsed.add_call(call)
        self._calls += 1
        self._content.call_made()


# `{"name": "…", "arguments": {` (or "parameters") at the start of a call's body: from here on its
# arguments stream.
_STREAMED_CALL_HEAD = re.compile(
    r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)'
)


class _StreamedCall:
    """One Hermes call's body as it arrives: its name once the head is read, then its arguments
    object's text up to the brace that closes it (strings and escapes skipped)."""

    def __init__(self, index: int) -> None:
        self._index = index
        self._id = new_call_id()
        self._name: str | None = None
        self._scanned = 0  # how much of the body the arguments scan has read
        self._depth = 0
        self._in_string = self._escaped = False
        self._closed = False
        self._arguments = ""

    @property
    def opened(self) -> bool:
        return self._name is not None

    def read(self, body: str, parsed: Parsed) -> None:
        """The body so far: opens the call once its head is there, then adds the new arguments text."""
        opens = self._name is None
        if opens:
            head = _STREAMED_CALL_HEAD.match(body)
            if head is None:
                return
            self._name = json.loads(head.group(1))
            self._scanned = head.end()
        assert self._name is not None
        added = self._scan(body)
        self._arguments += added
        if opens or added:
            parsed.fragments.append(CallFragment(self._index, self._id, self._name, added, opens, False))

    def finish(self, parsed: Parsed) -> ToolCall:
        """The complete call: its arguments as streamed (all of them, if the object never closed)."""
        assert self._name is not None
        parsed.fragments.append(CallFragment(self._index, self._id, self._name, "", False, True))
        return ToolCall(self._index, self._id, self._name, self._arguments)

    def _scan(self, body: str) -> str:
        """The arguments text in body[_scanned:] up to the object's closing brace."""
        begin = self._scanned
        position = begin
        while position < len(body) and not self._closed:
            char = body[position]
            position += 1
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char == "{":
                self._depth += 1
            elif char == "}":
                self._depth -= 1
                self._closed = self._depth == 0
        self._scanned = position
        return body[begin:position]


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
        if not calls:
            return Parsed(content=held)
        parsed = Parsed()
        for call in calls:
            parsed.add_call(call)
        return parsed


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
