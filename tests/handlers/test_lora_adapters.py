"""The LoRA admin routes and the adapter a generation runs with, over a scripted engine and an
adapter table double (the real one, with the trust policy and a real engine, is in
tests/e2e/test_lora.py): who may call the routes, how each refusal answers, what `/v1/models`
lists, and which adapter every generation route hands the engine."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.api import AdapterRefused
from handlers.context import AdapterEntry
from pooled.configuration.settings import Settings
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL, StubModel
from tests.fake_engine import FakeEngine
from text import ChatTemplate, Tokenizer

BASE_ID = "pooled/tiny-test"
ENTRY = AdapterEntry(
    name="sql",
    path="/adapters/sql",
    rank=8,
    alpha=16.0,
    targets=("q_proj", "v_proj"),
    size_bytes=1234,
    sha256="ab" * 32,
    loaded_at=1_700_000_000,
    requests=3,
    running=1,
    state="ready",
)


class Adapters:
    """The AdapterAdmin protocol over a dict; `refusal` makes the next load or unload refuse."""

    slots = 2

    def __init__(self) -> None:
        self.entries = {ENTRY.name: ENTRY}
        self.refusal: AdapterRefused | None = None

    def listing(self) -> list[AdapterEntry]:
        return [self.entries[name] for name in sorted(self.entries)]

    async def load(self, name: str, path: str) -> AdapterEntry:
        self._refuse()
        self.entries[name] = replace(ENTRY, name=name, path=path, requests=0, running=0)
        return self.entries[name]

    async def unload(self, name: str) -> None:
        self._refuse()
        del self.entries[name]

    def _refuse(self) -> None:
        if self.refusal is not None:
            raise self.refusal


@pytest.fixture
def adapters() -> Adapters:
    return Adapters()


def client_for(
    settings: Settings, smollm2: tuple[Tokenizer, ChatTemplate], engine: FakeEngine, adapters: Adapters | None
) -> TestClient:
    tokenizer, template = smollm2
    model = StubModel(engine=engine, tokenizer=tokenizer, chat_template=template, adapters=adapters)
    return TestClient(build_app(settings, server_context(settings, model)), base_url=BASE_URL)


@pytest.fixture
def lora_api(
    smollm2: tuple[Tokenizer, ChatTemplate], fake_engine: FakeEngine, adapters: Adapters
) -> Iterator[TestClient]:
    with client_for(Settings(), smollm2, fake_engine, adapters) as client:
        yield client


def test_the_listing_shows_each_adapter_with_its_parent(lora_api: TestClient) -> None:
    listed = lora_api.get("/v1/lora_adapters")
    assert listed.status_code == 200
    assert listed.json() == {
        "object": "list",
        "slots": 2,
        "data": [
            {
                "object": "lora_adapter",
                "name": "sql",
                "parent": BASE_ID,
                "path": "/adapters/sql",
                "rank": 8,
                "alpha": 16.0,
                "targets": ["q_proj", "v_proj"],
                "size_bytes": 1234,
                "sha256": "ab" * 32,
                "loaded_at": 1_700_000_000,
                "requests": 3,
                "running": 1,
                "state": "ready",
            }
        ],
    }


def test_load_and_unload_answer_with_the_adapter(lora_api: TestClient, adapters: Adapters) -> None:
    loaded = lora_api.post("/v1/lora_adapters", json={"name": "org/chat-v2", "path": "chat", "note": "ignored"})
    assert loaded.status_code == 200
    assert loaded.json()["name"] == "org/chat-v2" and loaded.json()["parent"] == BASE_ID
    assert "org/chat-v2" in adapters.entries
    deleted = lora_api.delete("/v1/lora_adapters/org/chat-v2")  # a name with a slash
    assert deleted.status_code == 200
    assert deleted.json() == {"object": "lora_adapter.deleted", "name": "org/chat-v2", "deleted": True}
    assert "org/chat-v2" not in adapters.entries


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("lora_path", 403),
        ("lora_not_allowed", 403),
        ("lora_digest", 403),
        ("lora_not_found", 404),
        ("lora_exists", 409),
        ("lora_slots_full", 409),
        ("lora_unloading", 409),
        ("lora_too_large", 413),
        ("lora_rank", 400),
        ("lora_mismatch", 400),
        ("lora_disabled", 400),
    ],
)
def test_each_refusal_answers_with_its_status_and_reason(
    lora_api: TestClient, adapters: Adapters, code: str, status: int
) -> None:
    adapters.refusal = AdapterRefused(code, f"refused by {code}")
    for answer in (
        lora_api.post("/v1/lora_adapters", json={"name": "x", "path": "x"}),
        lora_api.delete("/v1/lora_adapters/sql"),
    ):
        assert answer.status_code == status
        error = answer.json()["error"]
        assert error["code"] == code and error["message"].startswith(f"refused by {code}")


def test_a_name_requests_could_not_use_is_a_400(lora_api: TestClient) -> None:
    for name in ("", "-lead", "sp ace", "x" * 129):
        answer = lora_api.post("/v1/lora_adapters", json={"name": name, "path": "x"})
        assert answer.status_code == 400, name


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/lora_adapters", None),
        ("POST", "/v1/lora_adapters", {"name": "a", "path": "a"}),
        ("DELETE", "/v1/lora_adapters/sql", None),
    ],
)
def test_admin_off_is_a_403_and_the_key_is_needed_when_set(
    smollm2: tuple[Tokenizer, ChatTemplate],
    fake_engine: FakeEngine,
    adapters: Adapters,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    with client_for(Settings(lora_admin=False), smollm2, fake_engine, adapters) as off:
        answer = off.request(method, path, json=body)
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "lora_admin_disabled"
        assert off.get("/v1/models").json()["data"][1]["id"] == "sql"  # still served, only not administered
    with client_for(Settings(api_key="sekrit"), smollm2, fake_engine, adapters) as keyed:
        assert keyed.request(method, path, json=body).status_code == 401
        assert keyed.request(method, path, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert keyed.request(method, path, json=body, headers={"Authorization": "Bearer sekrit"}).status_code == 200
    assert "sql" in adapters.entries or method == "DELETE"


def test_the_routes_wait_for_the_model_and_an_encoder_has_no_adapters(
    smollm2: tuple[Tokenizer, ChatTemplate], fake_engine: FakeEngine, adapters: Adapters
) -> None:
    tokenizer, template = smollm2
    loading = StubModel(state="loading", engine=fake_engine, tokenizer=tokenizer, adapters=adapters)
    with TestClient(build_app(Settings(), server_context(Settings(), loading)), base_url=BASE_URL) as client:
        answer = client.get("/v1/lora_adapters")
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
    with client_for(Settings(), smollm2, fake_engine, None) as encoder:
        assert encoder.get("/v1/lora_adapters").json() == {"object": "list", "data": [], "slots": 0}
        for answer in (
            encoder.post("/v1/lora_adapters", json={"name": "a", "path": "a"}),
            encoder.delete("/v1/lora_adapters/a"),
        ):
            assert answer.status_code == 400 and answer.json()["error"]["code"] == "lora_disabled"


@pytest.mark.parametrize("headers", [{}, {"anthropic-version": "2023-06-01"}], ids=["openai", "anthropic"])
def test_models_lists_each_ready_adapter_after_its_parent(
    lora_api: TestClient, adapters: Adapters, headers: dict[str, str]
) -> None:
    adapters.entries["going"] = replace(ENTRY, name="going", state="unloading")  # no longer nameable
    data = lora_api.get("/v1/models", headers=headers).json()["data"]
    assert [entry["id"] for entry in data] == [BASE_ID, "sql"]
    retrieved = lora_api.get("/v1/models/sql", headers=headers).json()
    assert retrieved["id"] == "sql"
    if not headers:
        assert "parent" not in data[0] and data[1]["parent"] == BASE_ID == retrieved["parent"]
        assert data[1]["max_model_len"] == data[0]["max_model_len"]
    assert lora_api.get("/v1/models/going", headers=headers).status_code == 404


CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
ROUTES = [
    ("/v1/chat/completions", CHAT),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 4}),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 4}),
    ("/v1/messages", {**CHAT, "max_tokens": 4}),
]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[route[0] for route in ROUTES])
@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_a_model_naming_an_adapter_runs_with_it_on_every_route(
    lora_api: TestClient, fake_engine: FakeEngine, path: str, body: dict[str, Any], stream: bool
) -> None:
    for model, adapter in (("sql", "sql"), ("gpt-4o", None), (BASE_ID, None)):
        answer = lora_api.post(path, json={**body, "model": model, "stream": stream})
        assert answer.status_code == 200, answer.text
        assert fake_engine.submitted[-1].adapter == adapter
        if not stream:
            assert answer.json()["model"] == (adapter or BASE_ID)
        else:
            assert f'"model":"{adapter or BASE_ID}"' in answer.text.replace(" ", "")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_lora_adapter_names_the_adapter_outright(lora_api: TestClient, fake_engine: FakeEngine, path: str) -> None:
    body = CHAT if "chat" in path else {"prompt": "Hi", "max_tokens": 4}
    answer = lora_api.post(path, json={**body, "model": "anything", "lora_adapter": "sql"})
    assert answer.status_code == 200 and answer.json()["model"] == "sql"
    assert fake_engine.submitted[-1].adapter == "sql"
    # A name the engine does not serve goes to it as asked: the engine's refusal is the 400.
    lora_api.post(path, json={**body, "lora_adapter": "nope"})
    assert fake_engine.submitted[-1].adapter == "nope"
