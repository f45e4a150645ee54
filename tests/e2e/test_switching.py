"""Switching the served model on a real `pooled serve`: two tiny random checkpoints of different
families (Llama, Qwen3) in a models folder, streams running while the server switches, a model
that fails to load, implicit switching by a request's `model`, and the catalog routes.

The checkpoints answer gibberish (random weights, a toy WordPiece vocabulary); what is checked is
which model answered and that nothing accepted was lost."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.tiny_checkpoints import build_tiny_checkpoint
from tests.engine.tiny_encoders import tokenizer_json
from tests.pooled_servers import running_server

LLAMA, QWEN3 = "pooled/tiny-llama", "pooled/tiny-qwen3"


def servable(name: str, directory: Path) -> Path:
    """A tiny checkpoint with a tokenizer: enough for `pooled serve` to run it as a chat model."""
    build_tiny_checkpoint(name, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "pad_token_id": 0, "eos_token_id": None}))
    (directory / "tokenizer.json").write_text(tokenizer_json(decoder=True))
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[PAD]", "unk_token": "[UNK]"}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return directory


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    models = tmp_path_factory.mktemp("models")
    servable("llama_tied", models / "tiny-llama")
    servable("qwen3", models / "tiny-qwen3")
    broken = servable("qwen3", models / "tiny-broken")
    (broken / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 64}))  # no layers
    args = ["--model", "tiny-llama", "--models-dir", str(models), "--ctx", "64", "--decode-lanes", "4"]
    with running_server(tmp_path_factory, args) as url:
        yield url


def complete(base: str, model: str = "x", tokens: int = 4) -> httpx.Response:
    body = {"model": model, "prompt": "hello world", "max_tokens": tokens, "temperature": 0}
    return httpx.post(f"{base}/v1/completions", json=body, timeout=300)


def stream(base: str, started: threading.Event) -> dict[str, Any]:
    """One streamed completion: the model each chunk named, its text, how it finished."""
    body = {"model": "x", "prompt": "hello world", "max_tokens": 40, "temperature": 0, "stream": True}
    seen: dict[str, Any] = {"models": set(), "text": "", "finish": None, "error": None}
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=300) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line.removeprefix("data: "))
            if "error" in chunk:
                seen["error"] = chunk["error"]
                continue
            seen["models"].add(chunk["model"])
            seen["text"] += chunk["choices"][0]["text"]
            seen["finish"] = chunk["choices"][0]["finish_reason"] or seen["finish"]
            started.set()
    return seen


def models_list(base: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = httpx.get(f"{base}/v1/models", timeout=30).json()["data"]
    return data


def test_the_folder_model_named_at_start_serves_and_the_others_are_listed(base: str) -> None:
    listed = models_list(base)
    assert listed[0]["id"] == LLAMA and listed[0]["active"] is True and listed[0]["status"] == "serving"
    others = {entry["id"]: entry for entry in listed[1:]}
    assert {QWEN3, "pooled/tiny-broken"} <= set(others)
    assert others[QWEN3]["available"] is True and others[QWEN3]["max_model_len"] == 64  # its trained context
    assert complete(base).json()["model"] == LLAMA


def test_a_switch_lets_running_streams_finish_on_the_old_model(base: str) -> None:
    starts = [threading.Event() for _ in range(3)]
    with ThreadPoolExecutor(4) as pool:
        streams = [pool.submit(stream, base, started) for started in starts]
        for started in starts:
            assert started.wait(300)
        switching = pool.submit(httpx.post, f"{base}/v1/models/switch", json={"id": QWEN3}, timeout=600)
        answers = [future.result() for future in streams]
        switched = switching.result()
    assert switched.status_code == 200, switched.text
    assert switched.json()["id"] == QWEN3 and switched.json()["status"] == "serving"
    for answer in answers:
        assert answer["error"] is None and answer["models"] == {LLAMA} and answer["finish"] in ("length", "stop")
    assert complete(base).json()["model"] == QWEN3  # the first request after the switch
    assert httpx.get(f"{base}/health", timeout=30).json()["model"] == QWEN3


def test_a_model_that_fails_to_load_leaves_the_old_one_serving(base: str) -> None:
    before = models_list(base)[0]["id"]
    failed = httpx.post(f"{base}/v1/models/switch", json={"id": "tiny-broken"}, timeout=600)
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "switch_failed"
    assert "pooled/tiny-broken did not load" in failed.json()["error"]["message"]
    served = models_list(base)[0]
    assert served["id"] == before and served["status"] == "failed" and served["reason"]
    assert complete(base).json()["model"] == before


def test_a_request_naming_another_model_switches_to_it(base: str) -> None:
    target = LLAMA if models_list(base)[0]["id"] == QWEN3 else QWEN3
    answer = complete(base, model=target)
    assert answer.status_code == 200 and answer.json()["model"] == target
    assert models_list(base)[0]["id"] == target and models_list(base)[0]["status"] == "serving"
    assert complete(base, model="gpt-4o").json()["model"] == target  # a name of no model: no switch


def test_unknown_models_and_refusals_answer_by_rule(base: str) -> None:
    missing = httpx.post(f"{base}/v1/models/switch", json={"id": "nope"}, timeout=30)
    assert missing.status_code == 404 and "a switch can serve" in missing.json()["error"]["message"]
    absent = httpx.post(f"{base}/v1/models/switch", json={"id": "smollm2-135m-instruct-q4_1"}, timeout=30)
    assert absent.status_code == 404 and "not downloaded" in absent.json()["error"]["message"]
    catalog = httpx.get(f"{base}/v1/models/catalog", timeout=30).json()
    row = next(row for row in catalog["data"] if row["id"] == "smollm2-135m-instruct-q4_1")
    assert row["state"] == "absent" and row["loaded"] is False and row["download"] is None
    assert httpx.post(f"{base}/v1/models/remove", json={"id": "nope"}, timeout=30).status_code == 404
    cancelled = httpx.post(f"{base}/v1/models/download/cancel", timeout=30).json()
    assert cancelled == {"cancelled": False, "download": None}
