"""The Messages API through the app, the engine a scripted double: blocks, stream events, tools, errors."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.api import Failed, Finished, GenerationRequest, Usage
from engine.serving.admission import admit
from generated import models
from pooled.configuration.settings import Settings
from tests.fake_engine import FakeEngine
from text import Tokenizer

MESSAGES = "/v1/messages"
HI = [{"role": "user", "content": "Hi"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
CALL_TEXT = 'I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'


def events(response: Any) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) per event; every `data:` line follows an `event:` line naming its type."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    parsed = []
    for chunk in response.text.strip().split("\n\n"):
        name_line, data_line = chunk.split("\n")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        models.AnthropicStreamPayload.model_validate(data)
        parsed.append((name, data))
    return parsed


def streamed_message(stream: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The message a client assembles from the events (as the SDK's accumulator does)."""
    message = stream[0][1]["message"]
    for name, data in stream[1:]:
        if name == "content_block_start":
            message["content"].append(data["content_block"])
        elif name == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            else:
                block["_json"] = block.get("_json", "") + delta["partial_json"]
        elif name == "content_block_stop":
            block = message["content"][data["index"]]
            if "_json" in block:
                block["input"] = json.loads(block.pop("_json"))
        elif name == "message_delta":
            message |= data["delta"]
            message["usage"] |= data["usage"]
    return message


def without_id(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "id"}


def test_answer_and_stream_are_equal_and_ordered(api: TestClient, fake_engine: FakeEngine) -> None:
    body = {"model": "claude-opus-4-8", "max_tokens": 64000, "messages": HI}
    whole = api.post(f"{MESSAGES}?beta=true", json=body, headers={"anthropic-version": "2023-06-01"})
    assert whole.status_code == 200, whole.text
    message = models.AnthropicMessage.model_validate(whole.json())
    assert message.model == "pooled/tiny-test" and message.stop_reason == "end_turn"
    assert message.content == [models.AnthropicTextBlock(type="text", text="Hello there, how can I help?")]
    prompt_tokens = len(fake_engine.submitted[0].prompt_ids)
    assert message.usage.input_tokens == prompt_tokens and message.usage.cache_read_input_tokens == 0
    # 64000 reaches the engine, whose admission clamps it to the room left
    assert admit(fake_engine.submitted[0], 2048, 4).max_tokens == 2048 - prompt_tokens

    stream = events(api.post(MESSAGES, json={**body, "stream": True}))
    names = [name for name, _ in stream]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert stream[0][1]["message"]["usage"]["input_tokens"] == prompt_tokens
    assert without_id(streamed_message(stream)) == without_id(whole.json())


def test_system_blocks_mid_conversation_system_and_volatile_line(api: TestClient, fake_engine: FakeEngine) -> None:
    def body(build: str) -> dict[str, Any]:
        return {
            "model": "m",
            "max_tokens": 5,
            "system": [
                {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197.{build}; cch=0f3a;"},
                {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            ],
            "messages": [*HI, {"role": "system", "content": "Agents: none."}],
            "metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "s"})},
            "thinking": {"type": "adaptive"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "high"},
        }

    for build in ("aaa", "bbb"):
        assert api.post(MESSAGES, json=body(build)).status_code == 200
    first, second = (request.prompt_ids for request in fake_engine.submitted)
    assert first == second  # the billing line changed, the prompt did not
    prompt = api.post("/v1/detokenize", json={"tokens": list(first)}).json()["prompt"]
    assert "billing" not in prompt
    assert prompt.index("You are Claude Code.") < prompt.index("Hi") < prompt.index("Agents: none.")
    count = api.post(f"{MESSAGES}/count_tokens", json=body("ccc")).json()
    assert count == {"input_tokens": len(first)}


@pytest.mark.parametrize("serving_settings", [Settings(decode_lanes=4, volatile_line_pattern=r"^Session: \d+$")])
def test_volatile_line_setting_adds_a_pattern(api: TestClient, fake_engine: FakeEngine) -> None:
    for session in ("1", "2"):
        system = f"Be brief.\nSession: {session}"
        assert (
            api.post(MESSAGES, json={"model": "m", "max_tokens": 5, "system": system, "messages": HI}).status_code
            == 200
        )
    first, second = (request.prompt_ids for request in fake_engine.submitted)
    assert first == second


@pytest.mark.parametrize("answer_text", [[CALL_TEXT]])
def test_tool_use_blocks_stream_equals_answer(api: TestClient) -> None:
    body = {"model": "m", "max_tokens": 200, "messages": HI, "tools": [WEATHER_TOOL]}
    whole = api.post(MESSAGES, json=body).json()
    assert whole["stop_reason"] == "tool_use"
    text, call = whole["content"]
    assert text == {"type": "text", "text": "I will check."}
    assert call["type"] == "tool_use" and call["id"].startswith("toolu_")
    assert (call["name"], call["input"]) == ("get_weather", {"city": "Rome"})
    stream = events(api.post(MESSAGES, json={**body, "stream": True}))
    # The input streams as the model writes it: several deltas that join to the call's JSON.
    parts = [
        data["delta"]["partial_json"]
        for kind, data in stream
        if kind == "content_block_delta" and data["index"] == 1 and data["delta"]["type"] == "input_json_delta"
    ]
    assert len(parts) > 1 and "".join(parts) == '{"city": "Rome"}'
    streamed = streamed_message(stream)
    assert [without_id(block) for block in streamed["content"]] == [without_id(block) for block in whole["content"]]
    assert streamed["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    "choice", [{"type": "any"}, {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}]
)
def test_forced_tool_choice_gives_a_valid_tool_use(
    api: TestClient, answer_text: list[str], choice: dict[str, Any]
) -> None:
    answer_text[0] = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    body = {"model": "m", "max_tokens": 200, "messages": HI, "tools": [WEATHER_TOOL], "tool_choice": choice}
    message = api.post(MESSAGES, json=body).json()
    assert message["stop_reason"] == "tool_use"
    (call,) = message["content"]
    assert call["name"] == "get_weather" and call["input"]["city"] in ("Paris", "Rome")


def test_tool_result_turn_and_thinking_sent_back(api: TestClient, fake_engine: FakeEngine) -> None:
    messages = [
        *HI,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Weather needed.", "signature": ""},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Sunny"}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such city", "is_error": True},
                {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    response = api.post(MESSAGES, json={"model": "m", "max_tokens": 5, "messages": messages, "tools": [WEATHER_TOOL]})
    assert response.status_code == 200, response.text
    prompt = api.post("/v1/detokenize", json={"tokens": list(fake_engine.submitted[0].prompt_ids)}).json()["prompt"]
    assert prompt.index('"city": "Rome"') < prompt.index("Sunny") < prompt.index("Error: no such city")
    assert prompt.index("Error: no such city") < prompt.index("And tomorrow?")


def test_last_assistant_message_is_continued(api: TestClient, fake_engine: FakeEngine, tokenizer: Tokenizer) -> None:
    messages = [*HI, {"role": "assistant", "content": "Sure:"}]
    assert api.post(MESSAGES, json={"model": "m", "max_tokens": 5, "messages": messages}).status_code == 200
    prompt = tokenizer.decode(list(fake_engine.submitted[0].prompt_ids))
    assert prompt.endswith("<|im_start|>assistant\nSure:")


@pytest.mark.parametrize("answer_text", [["One. Two. STOP here."]])
def test_stop_sequence(api: TestClient) -> None:
    body = {"model": "m", "max_tokens": 50, "messages": HI, "stop_sequences": ["STOP"]}
    message = api.post(MESSAGES, json=body).json()
    assert message["stop_reason"] == "stop_sequence" and message["stop_sequence"] == "STOP"
    assert message["content"][0]["text"] == "One. Two. "
    delta = [
        data for name, data in events(api.post(MESSAGES, json={**body, "stream": True})) if name == "message_delta"
    ]
    assert delta[0]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "STOP"}


@pytest.mark.parametrize("serving_settings", [Settings(decode_lanes=4, max_output_tokens=3)])
def test_server_output_cap_ends_with_max_tokens(api: TestClient) -> None:
    message = api.post(MESSAGES, json={"model": "m", "max_tokens": 32000, "messages": HI}).json()
    assert message["stop_reason"] == "max_tokens" and message["usage"]["output_tokens"] == 3


@pytest.mark.parametrize(
    "serving_settings", [Settings(decode_lanes=4, max_output_tokens=3, max_output_tokens_finish="stop")]
)
def test_a_cut_at_the_server_cap_can_end_the_turn_on_every_api(api: TestClient) -> None:
    """--max-output-tokens-finish stop: what the cap cut ends as a finished turn; a request's own
    smaller limit still ends as a length finish."""
    message = api.post(MESSAGES, json={"model": "m", "max_tokens": 32000, "messages": HI}).json()
    assert message["stop_reason"] == "end_turn" and message["usage"]["output_tokens"] == 3
    streamed = [
        data
        for name, data in events(
            api.post(MESSAGES, json={"model": "m", "max_tokens": 32000, "messages": HI, "stream": True})
        )
        if name == "message_delta"
    ]
    assert streamed[0]["delta"]["stop_reason"] == "end_turn"
    own = api.post(MESSAGES, json={"model": "m", "max_tokens": 2, "messages": HI}).json()
    assert own["stop_reason"] == "max_tokens"
    chat = api.post("/v1/chat/completions", json={"messages": HI}).json()
    assert chat["choices"][0]["finish_reason"] == "stop" and chat["usage"]["completion_tokens"] == 3
    response = api.post("/v1/responses", json={"input": "Hi"}).json()
    assert response["status"] == "completed" and response["incomplete_details"] is None
    completion = api.post("/v1/completions", json={"prompt": "Hi"}).json()
    assert completion["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, ["web_search", "web_search_20250305"]),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AA"}}]}
                ]
            },
            ["image"],
        ),
        ({"tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER_TOOL]}, ["nope"]),
        ({"tool_choice": {"type": "any"}}, ["no tools"]),
        ({"messages": [{"role": "user", "content": "word " * 2100}]}, ["2048"]),
        ({"max_tokens": 0}, ["max_tokens"]),
        ({"messages": []}, ["messages"]),
    ],
)
def test_refusals_are_anthropic_400s(
    api: TestClient, fake_engine: FakeEngine, body: dict[str, Any], words: list[str]
) -> None:
    response = api.post(MESSAGES, json={"model": "m", "max_tokens": 5, "messages": HI, **body})
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert all(word in error["error"]["message"] for word in words), error
    assert not fake_engine.submitted


def test_queue_full_is_529_with_retry_after(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.queue_full_after = 0
    for stream in (False, True):
        response = api.post(MESSAGES, json={"model": "m", "max_tokens": 5, "messages": HI, "stream": stream})
        assert response.status_code == 529 and response.headers["retry-after"] == "3"
        assert response.json()["error"]["type"] == "overloaded_error"


def test_failure_after_the_stream_started_is_an_error_event(api: TestClient, fake_engine: FakeEngine) -> None:
    def fail(request_id: int, request: object, sink: Any) -> None:
        sink(Failed("fault", "device lost"))

    fake_engine._run = fail  # type: ignore[method-assign]
    body = {"model": "m", "max_tokens": 5, "messages": HI}
    stream = events(api.post(MESSAGES, json={**body, "stream": True}))
    assert stream[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": "device lost"}})
    response = api.post(MESSAGES, json=body)
    assert response.status_code == 500 and response.json()["error"]["type"] == "api_error"


@pytest.mark.parametrize("serving_settings", [Settings(decode_lanes=4, keepalive_interval=0.05)])
def test_ping_events_while_a_stream_waits(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.gate.clear()
    threading.Timer(0.5, fake_engine.gate.set).start()
    stream = events(api.post(MESSAGES, json={"model": "m", "max_tokens": 5, "messages": HI, "stream": True}))
    assert [name for name, _ in stream].count("ping") > 2
    assert stream[-1][0] == "message_stop"


@pytest.mark.parametrize("serving_settings", [Settings(decode_lanes=4, api_key="sekrit")])
def test_api_key_as_claude_code_sends_it(api: TestClient) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": HI}
    refused = api.post(MESSAGES, json=body)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert api.post(MESSAGES, json=body, headers={"x-api-key": "sekrit"}).status_code == 200
    assert api.post(MESSAGES, json=body, headers={"authorization": "Bearer sekrit"}).status_code == 200


def test_engine_timeout_is_504_timeout_error(api: TestClient, fake_engine: FakeEngine) -> None:
    def time_out(request_id: int, request: GenerationRequest, sink: Any) -> None:
        sink(Finished(0, "timeout", None, Usage(len(request.prompt_ids), 0, 0)))

    fake_engine._run = time_out  # type: ignore[method-assign]
    response = api.post(MESSAGES, json={"model": "m", "max_tokens": 5, "messages": HI})
    assert response.status_code == 504 and response.json()["error"]["type"] == "timeout_error"


def test_banner_gives_client_settings_once_ready(api: TestClient) -> None:
    banner = api.get("/").text
    assert "export ANTHROPIC_BASE_URL=http://127.0.0.1:8080\n" in banner
    assert "export ANTHROPIC_MODEL=pooled/tiny-test" in banner
    assert 'wire_api = "responses"' in banner and 'base_url = "http://127.0.0.1:8080/v1"' in banner
    assert '"npm": "@ai-sdk/openai-compatible"' in banner
    assert "Context: 2048 tokens\n" in banner
