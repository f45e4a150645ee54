"""Prompt logprobs on `/v1/completions` (`echo` with `logprobs`), as lm-evaluation-harness's
`local-completions` model asks for a loglikelihood, against a real `pooled serve` with the default
model."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

CONTEXT = "The capital of France is"
CONTINUATION = " Paris"


def completion(server: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(f"{server}/v1/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def test_echo_with_logprobs_scores_every_prompt_token(server: str) -> None:
    """The loglikelihood request: every prompt token with its logprob (the first null), then the
    answer's token; the last prompt token's logprob is the one a request ending before it reports
    for that token as its next (prefill and decode arithmetic agree to the pool's rounding)."""
    body = {"prompt": CONTEXT + CONTINUATION, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
    choice = completion(server, body)["choices"][0]
    logprobs = choice["logprobs"]
    prompt_ids = httpx.post(f"{server}/v1/tokenize", json={"prompt": CONTEXT + CONTINUATION}).json()["tokens"]
    assert len(logprobs["tokens"]) == len(prompt_ids) + 1 and choice["text"].startswith(CONTEXT + CONTINUATION)
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert all(value <= 0 for value in logprobs["token_logprobs"][1:])
    assert all(len(top) == 1 for top in logprobs["top_logprobs"][1:])
    assert "".join(logprobs["tokens"][: len(prompt_ids)]) == CONTEXT + CONTINUATION
    assert logprobs["text_offset"][-1] == len(CONTEXT + CONTINUATION)

    before = completion(server, {"prompt": CONTEXT, "logprobs": 5, "max_tokens": 1, "temperature": 0})["choices"][0][
        "logprobs"
    ]["top_logprobs"][0]
    assert CONTINUATION in before, before  # " Paris" is among the 5 likeliest after the context
    assert logprobs["token_logprobs"][len(prompt_ids) - 1] == pytest.approx(before[CONTINUATION], abs=2e-3)


def test_token_id_prompts_and_streams_score_their_prompts_alike(server: str) -> None:
    text = {"prompt": CONTEXT + CONTINUATION, "echo": True, "logprobs": 2, "max_tokens": 1, "temperature": 0}
    by_text = completion(server, text)["choices"][0]["logprobs"]
    ids = httpx.post(f"{server}/v1/tokenize", json={"prompt": CONTEXT + CONTINUATION}).json()["tokens"]
    by_ids = completion(server, {**text, "prompt": ids})["choices"][0]["logprobs"]
    assert by_ids["token_logprobs"] == pytest.approx(by_text["token_logprobs"], abs=1e-6)
    with httpx.stream("POST", f"{server}/v1/completions", json={**text, "stream": True}, timeout=60) as reply:
        chunks = [line for line in reply.iter_lines() if line.startswith("data: {")]
    first = httpx.Response(200, content=chunks[0][len("data: ") :]).json()["choices"][0]["logprobs"]
    assert first["token_logprobs"][: len(ids)] == pytest.approx(by_text["token_logprobs"][: len(ids)], abs=1e-6)
