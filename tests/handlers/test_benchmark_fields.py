"""What benchmark clients (GuideLLM, vLLM's benchmarks) ask of the generation APIs, through the app,
the engine a scripted double that stops as the engine does: vLLM's `ignore_eos` on every API,
streamed or not, and `stream_options.continuous_usage_stats` on Chat Completions and Completions."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from generated import models
from tests.fake_engine import FakeEngine
from text import Tokenizer

HI = [{"role": "user", "content": "Hi"}]
LIMIT = 12
TURN = "Hi there."
PAST_THE_TURN = " And then the model writes on, past its own turn, for as long as it is let."

Outcome = tuple[int, str]  # the answer's completion tokens, and how the API says it ended


def payloads(response: Any) -> list[dict[str, Any]]:
    """The JSON of a stream's `data:` lines (without `[DONE]`)."""
    assert response.status_code == 200, response.text
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def chat_like(answer: dict[str, Any]) -> Outcome:
    return answer["usage"]["completion_tokens"], answer["choices"][0]["finish_reason"]


def chat_like_stream(events: list[dict[str, Any]]) -> Outcome:
    (finish,) = [c["choices"][0]["finish_reason"] for c in events if c["choices"] and c["choices"][0]["finish_reason"]]
    return events[-1]["usage"]["completion_tokens"], finish


def response_outcome(answer: dict[str, Any]) -> Outcome:
    return answer["usage"]["output_tokens"], answer["status"]


def response_stream(events: list[dict[str, Any]]) -> Outcome:
    return response_outcome(events[-1]["response"])


def message_outcome(answer: dict[str, Any]) -> Outcome:
    return answer["usage"]["output_tokens"], answer["stop_reason"]


def message_stream(events: list[dict[str, Any]]) -> Outcome:
    (delta,) = [event for event in events if event["type"] == "message_delta"]
    return delta["usage"]["output_tokens"], delta["delta"]["stop_reason"]


@dataclass(frozen=True)
class Api:
    path: str
    body: dict[str, Any]  # a request for LIMIT tokens
    stream_fields: dict[str, Any]  # what a stream adds to it
    answered: Callable[[dict[str, Any]], Outcome]
    streamed: Callable[[list[dict[str, Any]]], Outcome]
    at_limit: str  # how the API says the token limit cut the answer
    ended: str  # and how it says the model ended it


USAGE_ASKED = {"stream_options": {"include_usage": True}}
APIS = {
    "chat": Api(
        "/v1/chat/completions",
        {"messages": HI, "max_completion_tokens": LIMIT},
        USAGE_ASKED,
        chat_like,
        chat_like_stream,
        "length",
        "stop",
    ),
    "completions": Api(
        "/v1/completions",
        {"prompt": "Hi", "max_tokens": LIMIT},
        USAGE_ASKED,
        chat_like,
        chat_like_stream,
        "length",
        "stop",
    ),
    "responses": Api(
        "/v1/responses",
        {"input": "Hi", "max_output_tokens": LIMIT},
        {},
        response_outcome,
        response_stream,
        "incomplete",
        "completed",
    ),
    "messages": Api(
        "/v1/messages",
        {"model": "m", "messages": HI, "max_tokens": LIMIT},
        {},
        message_outcome,
        message_stream,
        "max_tokens",
        "end_turn",
    ),
}


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
@pytest.mark.parametrize("name", sorted(APIS))
def test_ignore_eos_ends_only_at_the_token_limit(
    api: TestClient, fake_engine: FakeEngine, tokenizer: Tokenizer, name: str, stream: bool
) -> None:
    """The model ends its turn (SmolLM2's `<|im_end|>`, its EOS) and writes on past `<|endoftext|>`
    (an end-of-turn token besides): with `ignore_eos` the answer runs to its limit all the same."""
    end_of_sequence, end_of_turn = tokenizer.eos_token_id, min(tokenizer.stop_token_ids - {tokenizer.eos_token_id})
    turn, after = tokenizer.encode(TURN), tokenizer.encode(PAST_THE_TURN)
    assert len(turn) + len(after) > LIMIT
    fake_engine.script = lambda request, row: [*turn, end_of_sequence, *after[:2], end_of_turn, *after[2:]]
    shape = APIS[name]

    def outcome(fields: dict[str, Any]) -> Outcome:
        body = {**shape.body, **fields}
        if stream:
            return shape.streamed(payloads(api.post(shape.path, json={**body, "stream": True, **shape.stream_fields})))
        response = api.post(shape.path, json=body)
        assert response.status_code == 200, response.text
        return shape.answered(response.json())

    assert outcome({"ignore_eos": True}) == (LIMIT, shape.at_limit)
    assert fake_engine.submitted[-1].sampling.ignore_eos
    assert outcome({}) == (len(turn), shape.ended)
    assert outcome({"ignore_eos": False}) == (len(turn), shape.ended)
    assert not fake_engine.submitted[-1].sampling.ignore_eos


def test_ignore_eos_keeps_the_requests_own_stop_strings(api: TestClient) -> None:
    body = {"messages": HI, "max_completion_tokens": 50, "ignore_eos": True, "stop": ["help"]}
    (choice,) = api.post("/v1/chat/completions", json=body).json()["choices"]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("Hello there, how can I ", "stop")


def usage_so_far(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def test_continuous_usage_counts_each_chat_choice_so_far(api: TestClient, tokenizer: Tokenizer) -> None:
    """vLLM's `continuous_usage_stats`: every chunk carries the prompt's tokens and its choice's
    tokens up to that chunk; the last chunk still carries the request's whole usage."""
    script = tokenizer.encode("Hello there, how can I help?")
    options = {"include_usage": True, "continuous_usage_stats": True}
    body = {"messages": HI, "n": 2, "stream": True, "stream_options": options}
    *chunks, last = payloads(api.post("/v1/chat/completions", json=body))
    for chunk in [*chunks, last]:
        models.ChatCompletionChunk.model_validate(chunk)
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 2 * len(script)
    prompt_tokens = last["usage"]["prompt_tokens"]
    texts, counts = ["", ""], [[], []]
    for chunk in chunks:
        (choice,) = chunk["choices"]
        index, count = choice["index"], chunk["usage"]["completion_tokens"]
        assert chunk["usage"] == usage_so_far(prompt_tokens, count)
        texts[index] += choice["delta"].get("content") or ""
        assert tokenizer.decode(script[:count]).startswith(texts[index])  # no text before its tokens are counted
        counts[index].append(count)
    for mine in counts:
        assert mine[0] == 0 and mine == sorted(mine) and mine[-1] == len(script)  # the role chunk, then so far


def test_continuous_usage_counts_each_completion_choice_against_its_prompt(api: TestClient) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    body = {"prompt": ["Hi", "Tell me more about it"], "n": 2, "stream": True, "stream_options": options}
    *chunks, last = payloads(api.post("/v1/completions", json=body))
    for chunk in [*chunks, last]:
        models.CompletionChunk.model_validate(chunk)
    prompts = {chunk["choices"][0]["index"] // 2: chunk["usage"]["prompt_tokens"] for chunk in chunks}
    assert prompts[0] < prompts[1] and last["usage"]["prompt_tokens"] == prompts[0] + prompts[1]
    finals = {}
    for chunk in chunks:
        (choice,) = chunk["choices"]
        assert chunk["usage"] == usage_so_far(prompts[choice["index"] // 2], chunk["usage"]["completion_tokens"])
        finals[choice["index"]] = chunk["usage"]["completion_tokens"]
    assert sorted(finals) == [0, 1, 2, 3] and sum(finals.values()) == last["usage"]["completion_tokens"]


@pytest.mark.parametrize("options", [{"include_usage": True}, {"continuous_usage_stats": True}])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_without_both_options_chunks_carry_no_running_usage(api: TestClient, path: str, options: Any) -> None:
    """`include_usage` alone: null on every chunk but the last; `continuous_usage_stats` alone adds
    nothing, as in vLLM."""
    body = {"messages": HI} if path.endswith("chat/completions") else {"prompt": "Hi"}
    chunks = payloads(api.post(path, json={**body, "stream": True, "stream_options": options}))
    if options.get("include_usage"):
        *chunks, last = chunks
        assert last["choices"] == [] and last["usage"]["completion_tokens"] > 0
        assert all(chunk["usage"] is None for chunk in chunks)
    else:
        assert all("usage" not in chunk for chunk in chunks)
