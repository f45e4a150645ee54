"""Chat Completions, Completions and tokenize/detokenize through the app, the engine a scripted double."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.api import MAX_TOP_LOGPROBS, Failed, Finished, GenerationRequest, Usage
from engine.serving.admission import admit
from generated import models
from pooled.configuration.settings import Settings
from tests.fake_engine import FakeEngine
from text import Tokenizer

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "Hi"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def stream_events(response: Any) -> list[Any]:
    """The JSON payloads of a stream's `data:` lines, with "[DONE]" kept as a string."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line[len("data: ") :] for line in response.text.splitlines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def streamed_chat(chunks: list[Any]) -> dict[int, dict[str, Any]]:
    """Per choice: concatenated content, reasoning and tool calls, and the finish reason."""
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        if chunk == "[DONE]":
            continue
        models.ChatCompletionChunk.model_validate(chunk)
        for choice in chunk["choices"]:
            state = choices.setdefault(choice["index"], {"content": "", "calls": {}, "finish": None, "logprobs": []})
            delta = choice["delta"]
            state["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls", []):
                entry = state["calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                entry["name"] += call["function"].get("name", "")
                entry["arguments"] += call["function"].get("arguments", "")
            if choice.get("logprobs"):
                state["logprobs"] += choice["logprobs"]["content"]
            if choice["finish_reason"]:
                state["finish"] = choice["finish_reason"]
    return choices


def test_chat_answer(api: TestClient, fake_engine: FakeEngine) -> None:
    response = api.post(CHAT, json={"model": "anything", "messages": HI, "max_tokens": 50})
    assert response.status_code == 200, response.text
    answer = models.ChatCompletion.model_validate(response.json())
    assert answer.model == "pooled/tiny-test"
    assert answer.choices[0].message.content == "Hello there, how can I help?"
    assert answer.choices[0].finish_reason == "stop"
    request = fake_engine.submitted[0]
    assert answer.usage.prompt_tokens == len(request.prompt_ids) and answer.usage.completion_tokens > 0
    assert answer.usage.prompt_tokens_details.cached_tokens == 0
    assert request.max_tokens == 50


def test_chat_stream_equals_answer_with_usage_and_logprobs(api: TestClient) -> None:
    body = {"messages": HI, "n": 2, "logprobs": True, "top_logprobs": 2}
    whole = api.post(CHAT, json=body).json()
    chunks = stream_events(api.post(CHAT, json={**body, "stream": True, "stream_options": {"include_usage": True}}))
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"] == whole["usage"]
    streamed = streamed_chat(chunks)
    for choice in whole["choices"]:
        mine = streamed[choice["index"]]
        assert mine["content"] == choice["message"]["content"] and mine["finish"] == choice["finish_reason"]
        assert mine["logprobs"] == choice["logprobs"]["content"]
        assert len(choice["logprobs"]["content"][0]["top_logprobs"]) == 2


@pytest.mark.parametrize(
    "answer_text",
    [['I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>']],
)
def test_tool_calls_stream_equals_answer(api: TestClient, fake_engine: FakeEngine) -> None:
    body = {"messages": HI, "tools": [WEATHER_TOOL]}
    whole = api.post(CHAT, json=body).json()
    message = whole["choices"][0]["message"]
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] == "I will check."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Rome"})
    ]
    streamed = streamed_chat(stream_events(api.post(CHAT, json={**body, "stream": True})))[0]
    assert streamed["content"] == message["content"] and streamed["finish"] == "tool_calls"
    assert list(streamed["calls"].values()) == [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in message["tool_calls"]
    ]
    # Templates without tool support get them in a system prompt section.
    prompt = fake_engine.submitted[0].prompt_ids
    assert "get_weather" in api.post("/v1/detokenize", json={"tokens": list(prompt)}).json()["prompt"]


def test_tool_choice_required_forces_a_valid_call(api: TestClient) -> None:
    body = {"messages": HI, "tools": [WEATHER_TOOL], "tool_choice": "required", "parallel_tool_calls": False}
    choice = api.post(CHAT, json=body).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["city"] in ("Paris", "Rome")


def test_named_tool_must_be_offered(api: TestClient) -> None:
    body = {"messages": HI, "tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}
    response = api.post(CHAT, json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "tool_choice"


def test_json_schema_output_validates(api: TestClient) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}, "n": {"type": "integer"}},
        "required": ["answer", "n"],
        "additionalProperties": False,
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}}
    content = api.post(CHAT, json={"messages": HI, "response_format": response_format, "max_tokens": 40}).json()
    value = json.loads(content["choices"][0]["message"]["content"])
    assert value["answer"] in ("yes", "no") and isinstance(value["n"], int)


def test_invalid_schema_is_a_400_naming_the_field(api: TestClient) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "objekt"}}}
    response = api.post(CHAT, json={"messages": HI, "response_format": response_format})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "response_format.json_schema.schema"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 5}, "n"),
        ({"logit_bias": {str(i): 1 for i in range(10_001)}}, "logit_bias"),
        ({"logit_bias": {"999999": 1}}, "logit_bias"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"stop": ["x" * 1025]}, "stop"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, None),
    ],
)
def test_checked_before_the_engine(api: TestClient, fake_engine: FakeEngine, body: dict, param: str | None) -> None:
    response = api.post(CHAT, json={"messages": HI, **body})
    assert response.status_code == 400, response.text
    if param:
        assert response.json()["error"]["param"] == param
    assert fake_engine.submitted == []


def test_prompt_over_the_context(api: TestClient) -> None:
    response = api.post(CHAT, json={"messages": [{"role": "user", "content": "word " * 3000}]})
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "context_length_exceeded"
    assert "2048" in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, {"messages": [{"role": "user", "content": "word " * 3000}]}, "messages"),
        ("/v1/completions", {"prompt": "word " * 3000}, "prompt"),
        ("/v1/responses", {"input": "word " * 3000}, "input"),
        ("/v1/completions", {"prompt": "Hi", "n": 5}, "n"),
    ],
)
def test_the_engines_refusal_names_the_apis_own_field(
    api: TestClient, fake_engine: FakeEngine, path: str, body: dict, param: str
) -> None:
    """The engine's admission decides (engine/serving/admission.py); each API names the field its way."""
    response = api.post(path, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert fake_engine.submitted == []


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt": "Hi", "n": 0}, "n"),
        (CHAT, {"messages": HI, "n": 0}, "n"),
        (CHAT, {"messages": HI, "prompt_logprobs": -1}, "prompt_logprobs"),
        (CHAT, {"messages": HI, "prompt_logprobs": MAX_TOP_LOGPROBS + 1}, "prompt_logprobs"),
        ("/v1/completions", {"prompt": "Hi", "prompt_logprobs": MAX_TOP_LOGPROBS + 1}, "prompt_logprobs"),
    ],
)
def test_the_requests_own_shape_is_the_specs(
    api: TestClient, fake_engine: FakeEngine, path: str, body: dict, param: str
) -> None:
    """`max_tokens` and `n` at least 1, `prompt_logprobs` from 0 to the engine's MAX_TOP_LOGPROBS:
    the spec's rules, refused before a handler runs; the engine takes a request as given on them."""
    response = api.post(path, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert fake_engine.submitted == []


def test_the_specs_logprob_limits_are_the_engines() -> None:
    """The spec states the limit the device's top-k is compiled for (engine/api.py MAX_TOP_LOGPROBS)."""
    for model, field in [
        (models.ChatCompletionRequest, "top_logprobs"),
        (models.ChatCompletionRequest, "prompt_logprobs"),
        (models.CompletionRequest, "prompt_logprobs"),
        (models.CreateResponseRequest, "top_logprobs"),
    ]:
        limits = [getattr(rule, "le", None) for rule in model.model_fields[field].metadata]
        assert MAX_TOP_LOGPROBS in limits, (model.__name__, field, limits)


def test_max_tokens_clamped_to_the_room_left(api: TestClient, fake_engine: FakeEngine) -> None:
    assert api.post(CHAT, json={"messages": HI, "max_tokens": 10**6}).status_code == 200
    request = fake_engine.submitted[0]  # the request's own limit; the engine's admission clamps it
    assert request.max_tokens == 10**6 and admit(request, 2048, 4).max_tokens == 2048 - len(request.prompt_ids)


def test_stop_string_cuts_and_cancels(api: TestClient, fake_engine: FakeEngine) -> None:
    choice = api.post(CHAT, json={"messages": HI, "stop": [", how"]}).json()["choices"][0]
    assert choice["message"]["content"] == "Hello there" and choice["finish_reason"] == "stop"
    assert fake_engine.cancelled == {1}


def test_queue_full_is_429_with_retry_after(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.queue_full_after = 0
    for stream in (False, True):
        response = api.post(CHAT, json={"messages": HI, "stream": stream})
        assert response.status_code == 429 and response.headers["retry-after"] == "3"


def test_failure_after_the_stream_started_is_a_last_error_line(api: TestClient, fake_engine: FakeEngine) -> None:
    def fail(request_id: int, request: object, sink: Any) -> None:
        sink(Failed("fault", "device lost"))

    fake_engine._run = fail  # type: ignore[method-assign]
    chunks = stream_events(api.post(CHAT, json={"messages": HI, "stream": True}))
    assert chunks[-1]["error"]["message"] == "device lost" and "[DONE]" not in chunks
    response = api.post(CHAT, json={"messages": HI})
    assert response.status_code == 500 and response.json()["error"]["code"] == "engine_fault"


def test_history_with_tool_calls_and_reasoning_is_accepted(api: TestClient) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should call the tool.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{broken"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    ]
    assert api.post(CHAT, json={"messages": messages, "tools": [WEATHER_TOOL]}).status_code == 200


def test_completions_echo_n_and_stream(api: TestClient) -> None:
    body = {"prompt": ["Say:", "Again:"], "n": 2, "max_tokens": 4, "echo": True}
    whole = models.Completion.model_validate(api.post("/v1/completions", json=body).json())
    assert [c.index for c in whole.choices] == [0, 1, 2, 3]
    assert whole.choices[2].text.startswith("Again:") and whole.choices[0].finish_reason == "length"
    chunks = stream_events(api.post("/v1/completions", json={**body, "stream": True}))
    texts: dict[int, str] = {}
    for chunk in chunks[:-1]:
        models.CompletionChunk.model_validate(chunk)
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    assert [texts[c.index] for c in whole.choices] == [c.text for c in whole.choices]


def test_completions_refusals(api: TestClient) -> None:
    for body in ({"prompt": "x", "suffix": "y"}, {"prompt": "x", "best_of": 3}, {"prompt": ""}, {"prompt": [10**7]}):
        assert api.post("/v1/completions", json=body).status_code == 400, body


def test_tokenize_and_detokenize(api: TestClient, tokenizer: Tokenizer) -> None:
    plain = api.post("/v1/tokenize", json={"prompt": "Hello world", "return_token_strs": True}).json()
    assert plain["tokens"] == tokenizer.encode("Hello world", add_special_tokens=True)
    assert plain["count"] == len(plain["tokens"]) and plain["max_model_len"] == 2048 and plain["token_strs"]
    chat = api.post("/v1/tokenize", json={"messages": HI}).json()
    assert chat["tokens"][0] == tokenizer.control_tokens["<|im_start|>"]
    text = api.post("/v1/detokenize", json={"tokens": chat["tokens"]}).json()["prompt"]
    assert text.endswith("<|im_start|>assistant\n")
    assert api.post("/v1/detokenize", json={"tokens": [-1]}).status_code == 400


def test_vllms_root_tokenizer_routes_and_tokenizer_info(api: TestClient, tokenizer: Tokenizer) -> None:
    """What lm-evaluation-harness's remote tokenizer sends: /tokenizer_info, then /tokenize and
    /detokenize at the root, as vLLM serves them."""
    info = api.get("/tokenizer_info").json()
    assert info["eos_token"] == tokenizer.eos_token and info["bos_token"] == tokenizer.bos_token
    assert info["chat_template"] and "<|im_start|>" in info["chat_template"] and info["model_max_length"] == 2048
    body = {"prompt": "Hello world", "add_special_tokens": False}
    assert api.post("/tokenize", json=body).json() == api.post("/v1/tokenize", json=body).json()
    # A control token spelled in a prompt stays text, as /v1/completions reads prompts.
    spelled = api.post("/tokenize", json={"prompt": info["eos_token"], "add_special_tokens": False}).json()["tokens"]
    assert spelled == tokenizer.encode(info["eos_token"]) and spelled != [tokenizer.eos_token_id]
    assert api.post("/detokenize", json={"tokens": tokenizer.encode("Hello world")}).json() == {"prompt": "Hello world"}


def test_client_gone_cancels_the_engine_request(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.gate.clear()
    with api.stream("POST", CHAT, json={"messages": HI, "stream": True}) as response:
        assert response.status_code == 200
    fake_engine.gate.set()
    done = threading.Event()
    for _ in range(50):
        if fake_engine.cancelled:
            done.set()
            break
        threading.Event().wait(0.05)
    assert done.is_set()


@pytest.mark.parametrize("serving_settings", [Settings(decode_lanes=4, keepalive_interval=0.05)])
def test_keepalive_comments_while_a_stream_waits(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.gate.clear()
    threading.Timer(0.5, fake_engine.gate.set).start()
    response = api.post(CHAT, json={"messages": HI, "stream": True})
    assert response.text.startswith("data: ")  # the role chunk goes out at once
    assert ": keep-alive\n\n" in response.text
    assert stream_events(response)[-1] == "[DONE]"


def test_engine_timeout_is_504(api: TestClient, fake_engine: FakeEngine) -> None:
    def time_out(request_id: int, request: GenerationRequest, sink: Any) -> None:
        assert request.stall_timeout == 300.0  # from --request-timeout
        sink(Finished(0, "timeout", None, Usage(len(request.prompt_ids), 0, 0)))

    fake_engine._run = time_out  # type: ignore[method-assign]
    response = api.post(CHAT, json={"messages": HI})
    assert response.status_code == 504 and response.json()["error"]["code"] == "timeout"
