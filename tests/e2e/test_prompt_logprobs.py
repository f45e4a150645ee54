"""Prompt logprobs on `/v1/completions` (`echo` with `logprobs`), as lm-evaluation-harness's
`local-completions` model asks for a loglikelihood, against a real `pooled serve` with the default
model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
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


# Two local tasks in lm-evaluation-harness's YAML: one scored by loglikelihood (multiple choice;
# the harness puts a space between the question and each choice), one generated.
MC_TASK = """task: pooled_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""
GEN_TASK = """task: pooled_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""
MC_DOCS = [
    {"question": CONTEXT, "choices": ["Paris", "Rome", "Berlin"], "answer": 0},
    {"question": "Two plus two equals", "choices": ["four", "seven"], "answer": 0},
]


def test_lm_evaluation_harness_scores_and_generates_offline(server: str, tmp_path: Path) -> None:
    """lm-evaluation-harness's `local-completions` model, its tokenizer read from the server's
    routes (`tokenizer_backend=remote`), runs a loglikelihood task and a generate task with no
    network; each choice's loglikelihood is the sum of the server's echoed logprobs of its tokens."""
    (tmp_path / "mc.jsonl").write_text("\n".join(json.dumps(doc) for doc in MC_DOCS))
    (tmp_path / "gen.jsonl").write_text(
        json.dumps({"question": "Q: What is the capital of France?\nA:", "answer": " Paris"})
    )
    (tmp_path / "pooled_mc.yaml").write_text(MC_TASK.format(data=tmp_path / "mc.jsonl"))
    (tmp_path / "pooled_gen.yaml").write_text(GEN_TASK.format(data=tmp_path / "gen.jsonl"))
    model_args = f"base_url={server}/v1/completions,model=smollm2,tokenizer_backend=remote,num_concurrent=1"
    command = [str(Path(sys.executable).parent / "lm_eval"), "--model", "local-completions", "--model_args", model_args]
    command += ["--tasks", "pooled_mc,pooled_gen", "--include_path", str(tmp_path), "--log_samples"]
    command += ["--output_path", str(tmp_path / "out")]
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    ran = subprocess.run(command, capture_output=True, text=True, timeout=600, env=os.environ | offline)
    assert ran.returncode == 0, ran.stderr[-3000:]

    samples = {path.name.split("_2")[0]: path for path in (tmp_path / "out").rglob("samples_*.jsonl")}
    scored = [json.loads(line) for line in samples["samples_pooled_mc"].read_text().splitlines()]
    first = next(sample for sample in scored if sample["doc"]["question"] == CONTEXT)
    for choice, (loglikelihood, _greedy) in zip(MC_DOCS[0]["choices"], first["filtered_resps"], strict=True):
        echoed = completion(
            server, {"prompt": f"{CONTEXT} {choice}", "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
        )["choices"][0]["logprobs"]
        context_tokens = len(httpx.post(f"{server}/tokenize", json={"prompt": CONTEXT}).json()["tokens"])
        assert float(loglikelihood) == pytest.approx(sum(echoed["token_logprobs"][context_tokens:-1]), abs=1e-3)
    generated = json.loads(samples["samples_pooled_gen"].read_text().splitlines()[0])
    assert generated["filtered_resps"][0].strip()


def test_vllms_prompt_logprobs_on_completions_and_chat(server: str) -> None:
    """vLLM's `prompt_logprobs`: one entry per prompt token, the first null, each the token (with
    its rank) and the most likely tokens at its position by id; chat scores its rendered prompt."""
    body = {"prompt": CONTEXT + CONTINUATION, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2}
    scored = completion(server, body)["choices"][0]["prompt_logprobs"]
    ids = httpx.post(f"{server}/v1/tokenize", json={"prompt": CONTEXT + CONTINUATION}).json()["tokens"]
    echoed = completion(server, {**body, "echo": True, "logprobs": 1})["choices"][0]["logprobs"]["token_logprobs"]
    assert len(scored) == len(ids) and scored[0] is None
    for position, (token, entry) in enumerate(zip(ids[1:], scored[1:], strict=True), start=1):
        assert entry[str(token)]["logprob"] == pytest.approx(echoed[position], abs=1e-6)
        ranks = sorted(value["rank"] for value in entry.values())
        assert 1 in ranks and len(entry) <= 3 and entry[str(token)]["rank"] >= 1

    messages = [{"role": "user", "content": "Hi"}]
    chat = httpx.post(
        f"{server}/v1/chat/completions",
        json={"messages": messages, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0},
        timeout=60,
    ).json()
    rendered = httpx.post(f"{server}/v1/tokenize", json={"messages": messages}).json()["tokens"]
    assert len(chat["prompt_logprobs"]) == len(rendered) and chat["prompt_logprobs"][0] is None
    assert all(len(entry) == 1 for entry in chat["prompt_logprobs"][1:])
