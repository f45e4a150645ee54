"""The engine thread dies mid-stream (a device fault): every open stream ends with an error event in
its API's shape (no `[DONE]`, no usage receipt), /health says dead with the cause, and every model
route answers 503 from then on (Anthropic's too: its 529 would tell clients to retry).

The app, the model host, the handlers and the engine's scheduler are the product's own; the
device is tests/engine/fake_runner.py's, so the fault lands at a step of our choosing.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.engine import Engine
from engine.engine_config import EngineConfig
from pooled.configuration.settings import Settings
from pooled.hosting.model_host import Loaded, ModelHost
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL
from tests.engine.fake_runner import FakeDeviceError, FakeRunner
from text import ChatTemplate, Tokenizer

CONTEXT = 2048
STREAMS = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True},
    "/v1/completions": {"model": "m", "prompt": "Once upon a time", "stream": True},
    "/v1/responses": {"model": "m", "input": "Hi", "stream": True},
    "/v1/messages": {"model": "m", "max_tokens": 400, "messages": [{"role": "user", "content": "Hi"}], "stream": True},
}


@pytest.fixture
def served(smollm2: tuple[Tokenizer, ChatTemplate]) -> Iterator[tuple[TestClient, FakeRunner]]:
    tokenizer, template = smollm2
    config = EngineConfig(decode_lanes=4, page_size=16, prefill_chunk=256, max_context=CONTEXT)
    pages = math.ceil(CONTEXT / config.page_size) * 5 + 5
    runner = FakeRunner(config, pages, CONTEXT)
    engine = Engine(runner, pages, config, frozenset(), lambda *_: None)
    settings = Settings(decode_lanes=4)
    host = ModelHost(
        settings, Path("fake.gguf"), lambda *_: Loaded(CONTEXT, CONTEXT, None, "none", tokenizer, template, engine)
    )
    host.start()
    deadline = time.monotonic() + 10
    while host.state != "serving":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with TestClient(build_app(settings, server_context(settings, host)), base_url=BASE_URL) as client:
        yield client, runner
    engine.shutdown()


def stream_events(client: TestClient, path: str, body: dict) -> list[str]:
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        return [line for line in response.iter_lines() if line.startswith("data:")]


@pytest.mark.parametrize("path", sorted(STREAMS))
def test_a_device_fault_mid_stream_ends_every_stream_in_its_shape(
    served: tuple[TestClient, FakeRunner], path: str
) -> None:
    client, runner = served
    runner.fail_with, runner.fail_after = FakeDeviceError("device lost"), 6  # a few tokens in
    events = stream_events(client, path, STREAMS[path])
    assert len(events) > 2 and "[DONE]" not in events[-1]
    last = json.loads(events[-1].removeprefix("data:").strip())
    if path == "/v1/messages":
        assert last["type"] == "error" and last["error"]["type"] == "api_error"
    elif path == "/v1/responses":
        assert last["type"] == "response.failed" and last["response"]["status"] == "failed"
    else:
        assert "error" in last and "choices" not in last
    receipts = ('"response.completed"', '"message_delta"', '"message_stop"', '"finish_reason":"stop"', "[DONE]")
    assert not any(receipt in event.replace(" ", "") for event in events for receipt in receipts)

    health = client.get("/health").json()
    assert health["state"] == "dead" and health["ok"] is False
    assert "device lost" in json.dumps(health)
    for other, body in STREAMS.items():
        refused = client.post(other, json={**body, "stream": False})
        assert refused.status_code == 503 and "Retry-After" not in refused.headers, (other, refused.text)
        assert "not running" in refused.text
