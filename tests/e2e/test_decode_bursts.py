"""Decode bursts end to end: a server with bursts of `--burst-steps`' default, run whatever a
step takes (`--burst-max-step-ms` lifted: under the tests' unoptimized XLA a step may take longer
than the default limit), streams the chat answers, logprobs, stop strings and length endings of
a server with bursts off, at temperature 0, through the real default model."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.pooled_servers import SMALL_ENGINE, running_server

PROMPTS = ["Hi", "What is the capital of France?", "Write a haiku about the sea."]


def _serving(tmp_path_factory: pytest.TempPathFactory, *bursts: str) -> Iterator[OpenAI]:
    args = [*SMALL_ENGINE, "--max-output-tokens", "none", *bursts]
    with running_server(tmp_path_factory, args, every_shape=True) as base:
        yield OpenAI(base_url=f"{base}/v1", api_key="pooled", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def bursting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    yield from _serving(tmp_path_factory, "--burst-max-step-ms", "1000000")


@pytest.fixture(scope="module")
def unbursting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    yield from _serving(tmp_path_factory, "--burst-steps", "0")


def _streamed(client: OpenAI, **fields: Any) -> tuple[str, str | None, list[str], int | None]:
    chunks = list(
        client.chat.completions.create(model="m", stream=True, stream_options={"include_usage": True}, **fields)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    logprobs = [
        e.token for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content or []
    ]
    usage = chunks[-1].usage
    return text, finishes[-1] if finishes else None, logprobs, None if usage is None else usage.completion_tokens


def test_streams_with_bursts_equal_streams_without(bursting: OpenAI, unbursting: OpenAI) -> None:
    client = bursting
    assert httpx.get(f"{bursting.base_url}config").json()["burst_steps"] > 1
    assert httpx.get(f"{unbursting.base_url}config").json()["burst_steps"] == 0
    for prompt in PROMPTS:
        messages = [{"role": "user", "content": prompt}]
        for fields in (
            {"max_tokens": 37, "temperature": 0},
            {"max_tokens": 23, "temperature": 0, "logprobs": True, "top_logprobs": 2},
            {"max_tokens": 13, "temperature": 0, "extra_body": {"ignore_eos": True}},
        ):
            assert _streamed(client, messages=messages, **fields) == _streamed(unbursting, messages=messages, **fields)
        # A stop string: the text of the answer without it, cut before the stop, nothing after it.
        free, _, _, _ = _streamed(unbursting, messages=messages, max_tokens=30, temperature=0)
        stop = free.split()[len(free.split()) // 2] if free.split() else "."
        bursting = _streamed(client, messages=messages, max_tokens=30, temperature=0, stop=[stop])
        assert bursting == _streamed(unbursting, messages=messages, max_tokens=30, temperature=0, stop=[stop])
        assert stop not in bursting[0] and bursting[1] == "stop"
