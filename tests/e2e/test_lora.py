"""LoRA adapters on a real `pooled serve` (a tiny random Llama GGUF in the default model's Q4_1
blocks, with its tokenizer and chat template; two adapter slots, nine decode lanes): one adapter
loaded at start by `--lora`, others loaded and unloaded over HTTP under the trust policy while
streams run, and every generation route running with the adapter it names.

A tiny model, not the default one: what is tested is the adapters' path through the server (slots,
policy, routes, hot loads beside streams), which a model's size does not change, and the default
model's nine lanes and adapter slots compiled shapes no other server shares (minutes, cold)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooled.hosting.model_host import default_model_path
from tests.engine.tiny_gguf_decoders import FFN, HEADS, HIDDEN, KV_HEADS, LAYERS, write_tiny_gguf
from tests.engine.tiny_lora import ALL, write_peft_adapter
from tests.pooled_servers import running_server

# The tiny model's shapes, which an adapter for it must have.
TINY = {
    "hidden_size": HIDDEN,
    "intermediate_size": FFN,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "num_hidden_layers": LAYERS,
}
# Scaled well past a trained adapter's, so that it changes greedy answers within a few tokens.
STRONG = {"r": 8, "lora_alpha": 64, "target_modules": list(ALL)}
STREAMS = 8
STREAM_TOKENS = 64


@dataclass
class Served:
    base: str
    root: Path
    start: Path
    model_id: str = ""
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.base, timeout=300)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    model = tmp_path_factory.mktemp("models") / "tiny-llama.gguf"
    write_tiny_gguf(model, {"default": "Q4_1"}, tied=True, tokenizer_from=default_model_path())
    root = tmp_path_factory.mktemp("lora-root")
    start = write_peft_adapter(tmp_path_factory.mktemp("operator") / "start", TINY, STRONG, seed=1)
    write_peft_adapter(root / "hot", TINY, STRONG, seed=2)
    write_peft_adapter(root / "wide", TINY, {**STRONG, "r": 16}, seed=3)
    write_peft_adapter(root / "other-model", {**TINY, "hidden_size": 64}, STRONG, seed=4)
    (root / "escape").symlink_to(start, target_is_directory=True)
    # One lane more than the streams, for the request that uses the adapter loaded beside them.
    args = ["--model", str(model), "--ctx", "256", "--decode-lanes", str(STREAMS + 1)]
    args += ["--max-loras", "2", "--max-lora-rank", "8", "--lora-root", str(root), "--lora", f"start={start}"]
    # Every shape first: tests compare greedy answers of requests sent at different times, which
    # must run on the same shapes (a step padded to a larger shape may round differently).
    with running_server(tmp_path_factory, args, every_shape=True) as base:
        server = Served(base, root, start)
        server.model_id = server.client.get("/v1/models").json()["data"][0]["id"]
        yield server
        server.client.close()


def completion(served: Served, prompt: str, tokens: int = 12, **fields: Any) -> dict[str, Any]:
    answer = served.client.post(
        "/v1/completions", json={"prompt": prompt, "max_tokens": tokens, "temperature": 0, **fields}
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_start_adapter_is_listed_and_served_as_a_model(served: Served) -> None:
    (entry,) = served.client.get("/v1/lora_adapters").json()["data"]
    weights = (served.start / "adapter_model.safetensors").read_bytes()
    assert entry["name"] == "start" and entry["parent"] == served.model_id and entry["state"] == "ready"
    assert entry["rank"] == 8 and entry["alpha"] == 64 and entry["targets"] == list(ALL)
    assert entry["sha256"] == hashlib.sha256(weights).hexdigest() and entry["size_bytes"] == len(weights)
    assert 0 < time.time() - entry["loaded_at"] < 3600
    models = served.client.get("/v1/models").json()["data"]
    assert [m["id"] for m in models[:2]] == [served.model_id, "start"] and models[1]["parent"] == served.model_id


def test_every_generation_route_runs_with_the_adapter_it_names(served: Served) -> None:
    base = completion(served, "The capital of France is")
    named = completion(served, "The capital of France is", model="start")
    chosen = completion(served, "The capital of France is", lora_adapter="start")
    assert named["choices"][0]["text"] == chosen["choices"][0]["text"] != base["choices"][0]["text"]
    assert named["model"] == chosen["model"] == "start" and base["model"] == served.model_id
    requested = served.client.get("/v1/lora_adapters").json()["data"][0]["requests"]
    assert requested >= 2
    chat = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8, "temperature": 0}
    routes = [
        ("/v1/chat/completions", chat, lambda body: body["choices"][0]["message"]["content"]),
        ("/v1/messages", chat, lambda body: body["content"][0]["text"]),
        (
            "/v1/responses",
            {"input": "Name a colour.", "max_output_tokens": 8, "temperature": 0},
            lambda body: body["output"][-1]["content"][0]["text"],
        ),
    ]
    for path, body, text in routes:
        plain = served.client.post(path, json={**body, "model": "any"}).json()
        adapted = served.client.post(path, json={**body, "model": "start"}).json()
        assert adapted["model"] == "start" and plain["model"] == served.model_id, path
        assert text(adapted) != text(plain), path


def test_an_adapter_not_loaded_is_a_400_naming_the_loaded_ones(served: Served) -> None:
    for path, body in (
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": True}),
    ):
        answer = served.client.post(path, json={**body, "lora_adapter": "nope"})
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "unknown_adapter"
        assert "'nope'" in answer.json()["error"]["message"] and "loaded: start" in answer.json()["error"]["message"]


def test_the_trust_policy_refuses_by_rule(served: Served) -> None:
    refusals = [
        ("escape", 403, "lora_path"),  # a symlink inside the root to a directory outside it
        ("../start", 403, "lora_path"),
        (str(served.start), 403, "lora_path"),  # the operator's own adapter, but outside the root
        ("wide", 400, "lora_rank"),
        ("other-model", 400, "lora_mismatch"),
        ("missing", 404, "lora_not_found"),
    ]
    for path, status, code in refusals:
        answer = served.client.post("/v1/lora_adapters", json={"name": "x", "path": path})
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (path, answer.text)
    assert served.client.post("/v1/lora_adapters", json={"name": "start", "path": "hot"}).status_code == 409
    assert served.client.post("/v1/lora_adapters", json={"name": "one", "path": "hot"}).status_code == 200
    full = served.client.post("/v1/lora_adapters", json={"name": "two", "path": "hot"})
    assert full.status_code == 409 and full.json()["error"]["code"] == "lora_slots_full"
    assert served.client.delete("/v1/lora_adapters/one").status_code == 200
    assert served.client.delete("/v1/lora_adapters/one").status_code == 404
    assert [a["name"] for a in served.client.get("/v1/lora_adapters").json()["data"]] == ["start"]


@dataclass
class Stream:
    text: str = ""
    arrivals: list[float] = field(default_factory=list)  # an event's, which may carry several tokens
    finish: str | None = None
    tokens: int = 0  # the usage's completion tokens


def stream_completion(served: Served, prompt: str, adapter: str | None, first: threading.Event | None) -> Stream:
    body = {"prompt": prompt, "max_tokens": STREAM_TOKENS, "temperature": 0, "stream": True, "lora_adapter": adapter}
    body["stream_options"] = {"include_usage": True}
    stream = Stream()
    with httpx.stream("POST", f"{served.base}/v1/completions", json=body, timeout=300) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[len("data: ") :])
            if event.get("usage"):
                stream.tokens = event["usage"]["completion_tokens"]
            if not event["choices"]:
                continue
            choice = event["choices"][0]
            stream.arrivals.append(time.monotonic())
            stream.text += choice["text"]
            stream.finish = choice["finish_reason"] or stream.finish
            if first is not None:
                first.set()
    return stream


PROMPTS = [f"Story {i}: once upon a time, in a land of {['ice', 'sand', 'rain', 'stone'][i % 4]}," for i in range(8)]


def eight_streams(served: Served, during: Any = None) -> tuple[list[Stream], Any]:
    """Eight greedy streams, half with the start adapter; `during` runs once every one has a token."""
    firsts = [threading.Event() for _ in PROMPTS]
    with ThreadPoolExecutor(STREAMS) as pool:
        futures = [
            pool.submit(stream_completion, served, prompt, "start" if i % 2 else None, firsts[i])
            for i, prompt in enumerate(PROMPTS)
        ]
        for first in firsts:
            assert first.wait(300)
        result = during() if during is not None else None
        return [future.result() for future in futures], result


def test_hot_load_and_unload_beside_eight_streams_changes_no_output_and_stalls_none(served: Served) -> None:
    compiles = served.client.get("/health").json()["engine"]["compiles_after_startup"]
    alone, _ = eight_streams(served)

    def load_use_unload() -> tuple[float, str]:
        loaded = served.client.post("/v1/lora_adapters", json={"name": "hot", "path": "hot"})
        assert loaded.status_code == 200, loaded.text
        used = completion(served, PROMPTS[0], tokens=4, model="hot")["choices"][0]["text"]
        assert served.client.delete("/v1/lora_adapters/hot").status_code == 200
        return time.monotonic(), used

    beside, (ended, used) = eight_streams(served, load_use_unload)
    assert [s.text for s in beside] == [s.text for s in alone]
    assert all(s.finish == "length" for s in beside)
    assert all(s.arrivals[-1] > ended for s in beside), "every stream was still running through the load"
    assert used != completion(served, PROMPTS[0], tokens=4)["choices"][0]["text"]
    # What would stall the streams is a compile on the engine thread (the adapter's file is read
    # off it, pooled/hosting/adapter_admin.py): the server's count says none ran. The gaps between
    # tokens are not compared: on a busy machine they move with the machine, not with the load.
    assert served.client.get("/health").json()["engine"]["compiles_after_startup"] == compiles


def state(served: Served, name: str) -> str | None:
    listed = served.client.get("/v1/lora_adapters").json()["data"]
    return next((adapter["state"] for adapter in listed if adapter["name"] == name), None)


def test_unload_waits_for_the_adapters_running_request(served: Served) -> None:
    assert served.client.post("/v1/lora_adapters", json={"name": "hot", "path": "hot"}).status_code == 200
    first = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(stream_completion, served, PROMPTS[1], "hot", first)
        assert first.wait(300)
        unloading = pool.submit(lambda: (served.client.delete("/v1/lora_adapters/hot"), time.monotonic()))
        deadline = time.monotonic() + 30
        while state(served, "hot") != "unloading":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused = served.client.post(
            "/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "model": "x", "lora_adapter": "hot"}
        )
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "unknown_adapter"
        stream = running.result()
        deleted, deleted_at = unloading.result()
    assert deleted.status_code == 200
    assert stream.finish == "length" and stream.tokens == STREAM_TOKENS
    assert deleted_at > stream.arrivals[-1]
    assert [a["name"] for a in served.client.get("/v1/lora_adapters").json()["data"]] == ["start"]
