"""The Responses API through the app, the engine a scripted double: items, tools, stream ≡ answer,
stored state, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.api import Failed
from generated import models
from pooled.configuration.settings import Settings
from tests.fake_engine import FakeEngine
from text import Tokenizer

RESPONSES = "/v1/responses"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def stream_payloads(response: Any) -> list[dict[str, Any]]:
    """Each event's payload, checked: an `event:` line naming its type, the schema, the sequence numbers."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads, name = [], None
    for line in response.text.splitlines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            payload = json.loads(line[len("data: ") :])
            assert payload["type"] == name
            models.ResponseStreamPayload.model_validate(payload)
            payloads.append(payload)
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    return payloads


def prompt_text(fake_engine: FakeEngine, tokenizer: Tokenizer, index: int = -1) -> str:
    return tokenizer.decode(list(fake_engine.submitted[index].prompt_ids))


def test_text_answer(api: TestClient, fake_engine: FakeEngine) -> None:
    response = api.post(RESPONSES, json={"model": "x", "input": "Hi", "max_output_tokens": 40, "metadata": {"k": "v"}})
    assert response.status_code == 200, response.text
    answer = models.ResponseObject.model_validate(response.json())
    assert answer.status == "completed" and answer.metadata == {"k": "v"}
    (message,) = answer.output
    assert isinstance(message, models.ResponseOutputMessage)
    assert message.content[0].text == "Hello there, how can I help?"  # type: ignore[union-attr]
    assert answer.usage is not None and answer.usage.input_tokens == len(fake_engine.submitted[0].prompt_ids)
    assert answer.usage.output_tokens > 0 and answer.usage.input_tokens_details.cache_write_tokens == 0
    assert fake_engine.submitted[0].max_tokens == 40


def test_stream_sequence_equals_answer(api: TestClient) -> None:
    whole = api.post(RESPONSES, json={"input": "Hi"}).json()
    events = stream_payloads(api.post(RESPONSES, json={"input": "Hi", "stream": True}))
    kinds = [e["type"] for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert deltas > 1
    completed = events[-1]["response"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == completed["output"][0]["content"][0]["text"] == whole["output"][0]["content"][0]["text"]
    assert completed["usage"]["output_tokens"] == whole["usage"]["output_tokens"]
    assert "usage" not in events[0]["response"] and events[0]["response"]["status"] == "in_progress"


def test_budget_ran_out_is_incomplete(api: TestClient) -> None:
    events = stream_payloads(api.post(RESPONSES, json={"input": "Hi", "stream": True, "max_output_tokens": 2}))
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["status"] == "incomplete"


def test_items_render_every_turn(api: TestClient, fake_engine: FakeEngine, tokenizer: Tokenizer) -> None:
    items = [
        {"role": "developer", "content": "Be terse."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {
            "type": "reasoning",
            "id": "rs_never_stored",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "hmm"}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "patched"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
        {"type": "item_reference", "id": "msg_elsewhere"},
        {"role": "user", "content": "Thanks"},
    ]
    tools = [
        WEATHER_TOOL,
        {"type": "custom", "name": "apply_patch", "description": "Patch files"},
        {"type": "web_search"},
    ]
    response = api.post(RESPONSES, json={"input": items, "instructions": "You help.", "tools": tools, "store": False})
    assert response.status_code == 200, response.text
    prompt = prompt_text(fake_engine, tokenizer)
    for text in (
        "You help.",
        "Be terse.",
        "Weather in Paris?",
        "get_weather",
        "Sunny, 21 C",
        "*** Begin Patch",
        "patched",
        "It is sunny.",
        "Thanks",
    ):
        assert text in prompt
    assert "web_search" not in prompt


def test_input_tokens_count_the_rendered_prompt(api: TestClient, fake_engine: FakeEngine) -> None:
    body = {"input": "Hi", "instructions": "Be brief.", "tools": [WEATHER_TOOL]}
    counted = api.post("/v1/responses/input_tokens", json=body)
    assert counted.status_code == 200, counted.text
    api.post(RESPONSES, json=body)
    assert counted.json() == {
        "object": "response.input_tokens",
        "input_tokens": len(fake_engine.submitted[-1].prompt_ids),
    }


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_call_validates(api: TestClient, stream: bool) -> None:
    body = {"input": "Weather?", "tools": [WEATHER_TOOL], "tool_choice": "required", "stream": stream}
    response = api.post(RESPONSES, json=body)
    if stream:
        events = stream_payloads(response)
        kinds = [e["type"] for e in events]
        assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
        output = events[-1]["response"]["output"]
    else:
        output = response.json()["output"]
    calls = [item for item in output if item["type"] == "function_call"]
    assert calls and calls[0]["name"] == "get_weather" and calls[0]["call_id"].startswith("call_")
    assert json.loads(calls[0]["arguments"])["city"] in ("Paris", "Rome")


def test_namespace_member_call_names_its_namespace(api: TestClient) -> None:
    namespace = {"type": "namespace", "name": "multi_agent_v1", "tools": [{**WEATHER_TOOL}]}
    body = {"input": "Weather?", "tools": [namespace], "tool_choice": {"type": "function", "name": "get_weather"}}
    (call, *_) = api.post(RESPONSES, json=body).json()["output"]
    assert call["type"] == "function_call" and call["namespace"] == "multi_agent_v1"


def test_custom_tool_chosen_is_generated_under_its_grammar(api: TestClient) -> None:
    tool = {
        "type": "custom",
        "name": "pick",
        "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "yes" | "no"'},
    }
    body = {"input": "Pick", "tools": [tool], "tool_choice": {"type": "custom", "name": "pick"}, "stream": True}
    events = stream_payloads(api.post(RESPONSES, json=body))
    (call,) = events[-1]["response"]["output"]
    assert call["type"] == "custom_tool_call" and call["input"] in ("yes", "no")
    assert "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta") == call["input"]


@pytest.mark.parametrize("answer_text", [["The answer."]])
def test_json_schema_format_is_enforced(api: TestClient) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    body = {"input": "JSON", "text": {"format": {"type": "json_schema", "name": "r", "schema": schema, "strict": True}}}
    answer = api.post(RESPONSES, json=body).json()
    assert isinstance(json.loads(answer["output"][0]["content"][0]["text"])["ok"], bool)
    assert answer["text"]["format"]["type"] == "json_schema"


@pytest.mark.parametrize("answer_text", [["<think>Let me see.</think>Yes."]])
def test_reasoning_item_when_the_model_thinks(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("handlers.generation.prompt.model_thinks", lambda tokenizer: True)
    events = stream_payloads(api.post(RESPONSES, json={"input": "Hi", "stream": True}))
    reasoning, message = events[-1]["response"]["output"]
    assert reasoning["type"] == "reasoning" and reasoning["content"] == [
        {"type": "reasoning_text", "text": "Let me see."}
    ]
    assert message["content"][0]["text"] == "Yes."
    assert "response.reasoning_text.delta" in [e["type"] for e in events]


def test_previous_response_continues_the_conversation(
    api: TestClient, fake_engine: FakeEngine, tokenizer: Tokenizer
) -> None:
    first = api.post(RESPONSES, json={"input": "My name is Ada."}).json()
    second = api.post(RESPONSES, json={"input": "What is my name?", "previous_response_id": first["id"]}).json()
    prompt = prompt_text(fake_engine, tokenizer)
    assert "My name is Ada." in prompt and "Hello there, how can I help?" in prompt and "What is my name?" in prompt
    items = api.get(f"{RESPONSES}/{second['id']}/input_items", params={"order": "asc"}).json()
    assert [item["type"] for item in items["data"]] == ["message", "message", "message"]
    assert api.get(f"{RESPONSES}/{second['id']}").json()["previous_response_id"] == first["id"]


def test_unknown_previous_response_is_400(api: TestClient) -> None:
    response = api.post(RESPONSES, json={"input": "Hi", "previous_response_id": "resp_nope"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "previous_response_not_found"
    assert response.json()["error"]["param"] == "previous_response_id"


def test_store_false_is_not_stored(api: TestClient) -> None:
    answer = api.post(RESPONSES, json={"input": "Hi", "store": False}).json()
    assert api.get(f"{RESPONSES}/{answer['id']}").status_code == 404


def test_failure_after_the_start_is_error_then_failed(api: TestClient, fake_engine: FakeEngine) -> None:
    def failing_submit(request: Any, sink: Any) -> int:
        sink(Failed("fault", "device lost"))
        return 1

    fake_engine.submit = failing_submit  # type: ignore[method-assign]
    events = stream_payloads(api.post(RESPONSES, json={"input": "Hi", "stream": True}))
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"] == {"code": "engine_fault", "message": "device lost"}


def test_queue_full_is_429_with_retry_after(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.queue_full_after = 0
    response = api.post(RESPONSES, json={"input": "Hi", "stream": True})
    assert response.status_code == 429 and response.headers["retry-after"] == "3"


def test_prompt_over_context_is_400_with_numbers(api: TestClient) -> None:
    response = api.post(RESPONSES, json={"input": "word " * 3000})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and "2048" in error["message"]


@pytest.mark.parametrize("serving_settings", [Settings(decode_lanes=4, stored_responses=2)])
def test_store_keeps_the_most_recently_used(api: TestClient) -> None:
    first, second = (api.post(RESPONSES, json={"input": "Hi"}).json()["id"] for _ in range(2))
    assert api.get(f"{RESPONSES}/{first}").status_code == 200  # now the most recently used
    third = api.post(RESPONSES, json={"input": "Hi"}).json()["id"]
    assert api.get(f"{RESPONSES}/{second}").status_code == 404
    assert api.get(f"{RESPONSES}/{first}").status_code == api.get(f"{RESPONSES}/{third}").status_code == 200
    continued = api.post(RESPONSES, json={"input": "Hi", "previous_response_id": second})
    assert continued.json()["error"]["code"] == "previous_response_not_found"


@pytest.mark.parametrize("serving_settings", [Settings(decode_lanes=4, stored_responses_bytes=2500)])
def test_store_drops_the_oldest_past_its_bytes(api: TestClient) -> None:
    ids = [api.post(RESPONSES, json={"input": "Hi " * 300}).json()["id"] for _ in range(3)]
    found = [api.get(f"{RESPONSES}/{response_id}").status_code for response_id in ids]
    assert found[0] == 404 and found[-1] == 200


def test_codex_shaped_request_streams_to_completion(api: TestClient) -> None:
    """Codex's body (real-clients.md §3): developer items with client ids, namespace, web_search and
    custom tools, reasoning summary, `store: false`, undocumented top-level fields."""
    body = {
        "model": "gpt-5.5",
        "stream": True,
        "store": False,
        "input": [
            {
                "type": "message",
                "id": "msg_c1",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Base."}],
            },
            {"type": "message", "id": "msg_c2", "role": "user", "content": [{"type": "input_text", "text": "say hi"}]},
        ],
        "tools": [
            {**WEATHER_TOOL, "strict": False},
            {"type": "namespace", "name": "multi_agent_v1", "tools": [{**WEATHER_TOOL, "name": "spawn_agent"}]},
            {"type": "web_search", "external_web_access": False},
            {
                "type": "custom",
                "name": "apply_patch",
                "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
            },
            {"type": "tool_search", "execution": "client"},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "7b0c",
        "client_metadata": {"x": "y"},
        "text": {"verbosity": "low"},
    }
    events = stream_payloads(api.post(RESPONSES, json=body))
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["usage"]["input_tokens"] > 0
    assert events[-1]["response"]["reasoning"] == {"effort": None, "summary": "auto"}
