"""The incremental text parsers: however the text is cut into pieces, the result is the same as in
one piece; stop strings never leak; malformed tool calls stay text."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from handlers.api_error import ApiError
from handlers.generation.reasoning import ReasoningSplitter, Split, prompt_opens_reasoning
from handlers.generation.stop_strings import StopStringMatcher, stop_strings
from handlers.generation.text_output import Piece, RowText
from handlers.generation.tool_calls import CallFragment, HermesParser, JsonCallParser, Parsed, ToolCall, ToolCallParser
from text import Tokenizer


def cuttings(text: str) -> Iterator[list[str]]:
    """The text whole, one character at a time, and cut in two at every position."""
    yield [text]
    yield list(text)
    for cut in range(1, len(text)):
        yield [text[:cut], text[cut:]]


def run_parser(parser: ToolCallParser, pieces: list[str]) -> tuple[str, list[tuple[str, str]]]:
    parsed = Parsed()
    for piece in pieces:
        step = parser.push(piece)
        parsed.content += step.content
        parsed.calls += step.calls
    end = parser.finish()
    return parsed.content + end.content, [(c.name, c.arguments) for c in parsed.calls + end.calls]


HERMES_CASES = {
    "plain": ("Just text, no calls.", "Just text, no calls.", []),
    "one call": (
        'Let me check.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "Let me check.",
        [("weather", '{"city": "Paris"}')],
    ),
    "two calls": (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>\n',
        "",
        [("a", "{}"), ("b", '{"x": 1}')],
    ),
    "malformed stays text": (
        '<tool_call>{"name": "a", "arguments": </tool_call> done',
        '<tool_call>{"name": "a", "arguments": </tool_call> done',
        [],
    ),
    "unterminated stays text": ('ok <tool_call>{"name": "a"', 'ok <tool_call>{"name": "a"', []),
    "string arguments": ('<tool_call>{"name": "a", "arguments": "{\\"k\\": 2}"}</tool_call>', "", [("a", '{"k": 2}')]),
    "lookalike tag": ("a <tool_c b", "a <tool_c b", []),
}


@pytest.mark.parametrize("case", HERMES_CASES.values(), ids=HERMES_CASES.keys())
def test_hermes_streaming_equals_whole(case: tuple[str, str, list[tuple[str, str]]]) -> None:
    text, content, calls = case
    for pieces in cuttings(text):
        assert run_parser(HermesParser(), pieces) == (content, calls), pieces


def test_llama_json_calls_and_plain_text() -> None:
    text = '{"name": "a", "parameters": {"q": "x;y"}}; {"name": "b", "parameters": {}}'
    for pieces in cuttings(text):
        assert run_parser(JsonCallParser(), pieces) == ("", [("a", '{"q": "x;y"}'), ("b", "{}")])
    assert run_parser(JsonCallParser(), ["{not json"]) == ("{not json", [])
    assert run_parser(JsonCallParser(), ["Hi ", "{x}"]) == ("Hi {x}", [])


def test_call_ids_are_unique_and_indexed() -> None:
    parser = HermesParser()
    parsed = parser.push(
        '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "a", "arguments": {}}</tool_call>'
    )
    assert [c.index for c in parsed.calls] == [0, 1] and parsed.calls[0].id != parsed.calls[1].id


@pytest.mark.parametrize("starts_inside", [False, True])
def test_reasoning_split_streaming_equals_whole(starts_inside: bool) -> None:
    text = ("" if starts_inside else "<think>") + "Let me think.\n</think>\n\nThe answer is 4."
    for pieces in cuttings(text):
        splitter = ReasoningSplitter(starts_inside)
        total = Split()
        for piece in [*pieces, None]:
            step = splitter.flush() if piece is None else splitter.push(piece)
            total.reasoning += step.reasoning
            total.content += step.content
        assert (total.reasoning, total.content) == ("Let me think.\n", "The answer is 4."), pieces


def test_no_think_tag_is_all_content() -> None:
    splitter = ReasoningSplitter(False)
    assert splitter.push("Hi <think> there").content == "Hi <think> there"
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_reasoning("<think>\n\n</think>\n\n")


@pytest.mark.parametrize("text", ["Count: 1, 2, STOP 3", "STOP", "abcSTO", "ST-OP no stop"])
def test_stop_strings_never_leak(text: str) -> None:
    expected = text.split("STOP")[0]
    for pieces in cuttings(text):
        matcher = StopStringMatcher(["STOP", "xyz"])
        out = "".join(matcher.push(piece) for piece in pieces)
        out += "" if matcher.matched else matcher.flush()
        assert out == expected, pieces
        assert (matcher.matched is not None) == ("STOP" in text)


def test_stop_string_limits() -> None:
    assert len(stop_strings([f"s{i}" for i in range(20)])) == 16  # clamped, as documented
    assert stop_strings("x") == ("x",) and stop_strings(None) == () and stop_strings(["", "a"]) == ("a",)
    with pytest.raises(ApiError) as too_long:
        stop_strings(["é" * 513])  # 1,026 bytes
    assert too_long.value.status == 400 and too_long.value.param == "stop"
    with pytest.raises(ApiError):
        stop_strings(["a" * 1000] * 5)  # 5,000 bytes in all


def row_output(row: RowText, ids: list[int]) -> tuple[list[Piece], Piece]:
    pieces = [row.push(token_id) for token_id in ids]
    pieces.append(row.finish())
    total = Piece()
    for piece in pieces:
        total.extend(piece)
    return pieces, total


def test_row_text_is_utf8_safe(tokenizer: Tokenizer) -> None:
    text = "Café 世界 🎉🎉 naïve — ok"
    pieces, total = row_output(RowText(tokenizer), tokenizer.encode(text))
    assert total.content == text
    assert all("\ufffd" not in piece.content for piece in pieces)


def test_row_text_stop_string_across_tokens(tokenizer: Tokenizer) -> None:
    row = RowText(tokenizer, stops=["END OF"])
    pieces, total = row_output(row, tokenizer.encode("Some words END OF TEXT and more"))
    assert total.content == "Some words " and row.stopped
    assert row.tokens < len(tokenizer.encode("Some words END OF TEXT and more"))


def test_row_text_tool_calls_from_tokens(tokenizer: Tokenizer) -> None:
    text = 'Sure.\n<tool_call>\n{"name": "f", "arguments": {"a": "é"}}\n</tool_call>'
    _, total = row_output(RowText(tokenizer, tool_parser=HermesParser()), tokenizer.encode(text))
    assert total.content == "Sure."
    assert [(c.name, json.loads(c.arguments)) for c in total.tool_calls] == [("f", {"a": "é"})]


def test_row_text_reasoning_tokens(tokenizer: Tokenizer) -> None:
    row = RowText(tokenizer, reasoning=ReasoningSplitter(True))
    _, total = row_output(row, tokenizer.encode("hmm</think>Yes"))
    assert (total.reasoning, total.content) == ("hmm", "Yes") and row.reasoning_tokens > 0


def run_fragments(parser: ToolCallParser, pieces: list[str]) -> tuple[list[CallFragment], list[ToolCall]]:
    fragments, calls = [], []
    for step in [*(parser.push(piece) for piece in pieces), parser.finish()]:
        fragments += step.fragments
        calls += step.calls
    return fragments, calls


STREAMED_CALLS = (
    'Let me check.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Par}is", "days": {"n": 3}}}\n</tool_call>'
    '<tool_call>{"arguments": {"q": 1}, "name": "late"}</tool_call>'
)


def test_hermes_call_arguments_stream_as_the_model_writes_them() -> None:
    """Cut anywhere, each call's fragments open it with its name, add its arguments' text as it
    arrives (a brace inside a string does not close them) and close it; they concatenate to the
    final call's arguments. A call whose name comes after its arguments arrives in one fragment."""
    for pieces in cuttings(STREAMED_CALLS):
        fragments, calls = run_fragments(HermesParser(), pieces)
        assert [(call.name, call.arguments) for call in calls] == [
            ("weather", '{"city": "Par}is", "days": {"n": 3}}'),
            ("late", '{"q": 1}'),
        ], pieces
        for call in calls:
            own = [fragment for fragment in fragments if fragment.index == call.index]
            assert own[0].opens and own[-1].closes and all(f.name == call.name and f.id == call.id for f in own)
            assert "".join(fragment.arguments for fragment in own) == call.arguments
    fragments, _ = run_fragments(HermesParser(), list(STREAMED_CALLS))
    assert len([f for f in fragments if f.index == 0 and f.arguments]) > 1  # streamed, not whole


def test_a_streamed_call_stands_when_the_answer_ends_inside_it() -> None:
    for pieces in cuttings('<tool_call>{"name": "a", "arguments": {"x": 1}'):
        _, calls = run_fragments(HermesParser(), pieces)
        assert [(call.name, call.arguments) for call in calls] == [("a", '{"x": 1}')], pieces
