"""The Messages API as the official `anthropic` SDK sees it, against a real `pooled serve` with the
default model (SmolLM2-135M): parsed answers and streams, the exact event order, forced tool use, a
tool-result turn, count_tokens, prefix reuse over a replayed agent session, and the error shapes.
Few tokens everywhere, greedy where an answer is compared."""

from __future__ import annotations

import itertools
import json
import secrets
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest
from anthropic import Anthropic

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Tokyo"]}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER: Any = {"name": "get_weather", "description": "Weather of a city", "input_schema": WEATHER_SCHEMA}
HI: Any = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY: Any = {"temperature": 0}  # the SDK's typed parameters no longer include temperature


@pytest.fixture(scope="module")
def claude(server: str) -> Anthropic:
    return Anthropic(base_url=server, api_key="anything", max_retries=0, timeout=300)


def _raw_events(server: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) per event of a raw stream, checking each `event:` names its data's type."""
    with httpx.stream("POST", f"{server}/v1/messages?beta=true", json=body, timeout=300) as response:
        assert response.status_code == 200
        text = "".join(response.iter_text())
    pairs = []
    for chunk in text.strip().split("\n\n"):
        name_line, data_line = chunk.split("\n")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        pairs.append((name, data))
    return pairs


def test_message_parses(claude: Anthropic) -> None:
    message = claude.messages.create(model="claude-opus-4-8", max_tokens=12, messages=HI, extra_body=GREEDY)
    assert message.model.startswith("pooled/smollm2") and message.role == "assistant"
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.content[0].type == "text" and message.content[0].text
    assert 0 < message.usage.output_tokens <= 12


def test_stream_parses_and_equals_the_answer(claude: Anthropic) -> None:
    body: Any = {"model": "m", "max_tokens": 10, "messages": HI, "extra_body": GREEDY}
    whole = claude.messages.create(**body)
    with claude.messages.stream(**body) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text == whole.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens


def test_event_order_is_anthropics(server: str) -> None:
    stream = _raw_events(server, {"model": "m", "max_tokens": 8, "messages": HI, "stream": True})
    names = [name for name, _ in stream if name != "ping"]
    assert names[0] == "message_start" and names[1] == "content_block_start"
    assert set(names[2:-3]) <= {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = stream[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    delta = next(data for name, data in stream if name == "message_delta")
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens") and delta["usage"]["output_tokens"] > 0


def test_tool_choice_tool_gives_a_valid_tool_use(claude: Anthropic) -> None:
    message = claude.messages.create(
        model="m",
        max_tokens=64,
        messages=[{"role": "user", "content": "What is the weather in Rome?"}],
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert message.stop_reason == "tool_use"
    (call,) = [block for block in message.content if block.type == "tool_use"]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    jsonschema.validate(call.input, WEATHER_SCHEMA)


def test_streamed_tool_use_and_a_tool_result_turn(claude: Anthropic) -> None:
    question: Any = {"role": "user", "content": "What is the weather in Tokyo?"}
    # One call: with parallel calls allowed the grammar admits more, and a 135M model may go on
    # calling until max_tokens.
    one_call: Any = {"type": "any", "disable_parallel_tool_use": True}
    with claude.messages.stream(
        model="m", max_tokens=64, messages=[question], tools=[WEATHER], tool_choice=one_call
    ) as stream:
        parts = [
            event.delta.partial_json
            for event in stream
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta"
        ]
        first = stream.get_final_message()
    assert len(parts) > 1 and json.loads("".join(parts)) == next(b.input for b in first.content if b.type == "tool_use")
    assert first.stop_reason == "tool_use"
    call = next(block for block in first.content if block.type == "tool_use")
    jsonschema.validate(call.input, WEATHER_SCHEMA)
    result: Any = {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 24 C", "is_error": False}
    second = claude.messages.create(
        model="m",
        max_tokens=16,
        messages=[question, {"role": "assistant", "content": first.content}, {"role": "user", "content": [result]}],
        tools=[WEATHER],
        tool_choice={"type": "none"},
    )
    assert second.stop_reason in ("end_turn", "max_tokens")
    assert second.content[0].type == "text"
    assert second.usage.cache_read_input_tokens  # the first turn's prompt is reused


def test_count_tokens_equals_the_input_tokens_reported(claude: Anthropic) -> None:
    # A fresh system prompt, so no prefix of it is cached and input_tokens is the whole prompt.
    body: Any = {
        "model": "m",
        "system": [{"type": "text", "text": f"Session {secrets.token_hex(8)}. Be brief."}],
        "messages": HI,
        "tools": [WEATHER],
    }
    counted = claude.messages.count_tokens(**body).input_tokens
    usage = claude.messages.create(max_tokens=4, **body).usage
    assert counted == usage.input_tokens + (usage.cache_read_input_tokens or 0)
    assert usage.cache_read_input_tokens == 0 and counted == usage.input_tokens


def _billing_line() -> str:
    """Claude Code's first system block: its build and request hashes change on every request."""
    return f"x-anthropic-billing-header: cc_version=2.1.197.{secrets.token_hex(2)}; cch={secrets.token_hex(3)};"


def _agent_turn_bodies(turns: int) -> list[dict[str, Any]]:
    """A recorded Claude-Code-style session, replayed: each request resends the whole conversation,
    with a billing line whose build hash changes every turn, a mid-conversation system message,
    thinking blocks sent back with an empty signature, and tool results."""
    system = "You are Claude Code, a coding agent. Use the tools to inspect the repository. " * 4
    conversation: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "List the files, then read the README."}]},
        {"role": "system", "content": "Available agents: general-purpose, Explore, Plan."},
    ]
    tools = [
        {
            "name": "Bash",
            "description": "Run a shell command",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
        {
            "name": "Read",
            "description": "Read a file",
            "input_schema": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}},
                "required": ["file_path"],
            },
        },
    ]
    bodies = []
    for turn in range(turns):
        bodies.append(
            {
                "model": "claude-opus-4-8",
                "max_tokens": 8,
                "extra_body": GREEDY,
                "system": [
                    {"type": "text", "text": _billing_line()},
                    {
                        "type": "text",
                        "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}},
                ],
                "messages": list(conversation),
                "tools": tools,
                "metadata": {"user_id": json.dumps({"device_id": "d1", "session_id": "s1"})},
                "thinking": {"type": "adaptive"},
            }
        )
        call_id = f"toolu_{turn:02d}"
        conversation += [
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"Step {turn}: run a command.", "signature": ""},
                    {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": f"ls dir{turn}"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": f"file_{turn}_a.py\nfile_{turn}_b.py\n" * 3,
                        "is_error": False,
                    }
                ],
            },
        ]
    return bodies


def test_replayed_agent_session_reuses_the_prefix(claude: Anthropic) -> None:
    usages = []
    for body in _agent_turn_bodies(5):
        counted = claude.messages.count_tokens(
            **{k: v for k, v in body.items() if k not in ("max_tokens", "extra_body", "metadata")}
        ).input_tokens
        with claude.messages.stream(**body) as stream:
            usage = stream.get_final_message().usage
        assert counted == usage.input_tokens + (usage.cache_read_input_tokens or 0)
        usages.append((usage.cache_read_input_tokens or 0, usage.input_tokens, counted))
    for (read, _, prompt), (read_next, _, _) in itertools.pairwise(usages):
        # The next turn reuses this turn's whole prompt, short of the last partial KV page.
        assert read_next > read and read_next >= prompt - 16, usages
    # After the first turn only the new turn (the answer echoed back and a tool result) is prefilled.
    assert all(prefilled < 120 for _, prefilled, _ in usages[1:]), usages


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "error_type"),
    [
        ("POST", "/v1/messages", {"model": "m", "messages": HI}, {}, 400, "invalid_request_error"),
        (
            "POST",
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "word " * 2100}]},
            {},
            400,
            "invalid_request_error",
        ),
        (
            "POST",
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": HI},
            {"origin": "https://evil.example"},
            403,
            "permission_error",
        ),
        ("POST", "/v1/messages/nope", {}, {}, 404, "not_found_error"),
        ("GET", "/v1/messages", None, {}, 405, "invalid_request_error"),
        (
            "POST",
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x" * (5 << 20)}]},
            {},
            413,
            "request_too_large",
        ),
    ],
)
def test_errors_in_anthropic_shape(
    server: str, method: str, path: str, body: Any, headers: dict[str, str], status: int, error_type: str
) -> None:
    response = httpx.request(method, f"{server}{path}", json=body, headers=headers, timeout=60)
    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == error_type and error["error"]["message"]


def test_sdk_raises_typed_errors(claude: Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "word " * 2100}])
    assert "2048" in str(raised.value)
