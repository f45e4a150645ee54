"""Host, Origin, CORS, token and body-size guards, each in both APIs' error shapes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from pooled.configuration.settings import Settings
from pooled.web.app import build_app, server_context
from pooled.web.guards import is_public
from tests.conftest import BASE_URL, StubModel

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
CHAT_BODY = {"messages": [{"role": "user", "content": "Hi"}]}


def make_client(**overrides: object) -> TestClient:
    settings = Settings(**overrides)  # type: ignore[arg-type]
    return TestClient(build_app(settings, server_context(settings, StubModel())), base_url=BASE_URL)


@pytest.fixture
def keyed() -> Iterator[TestClient]:
    with make_client(api_key="sekrit") as client:
        yield client


def test_foreign_host_is_refused_in_openai_shape(client: TestClient) -> None:
    response = client.post(CHAT, json=CHAT_BODY, headers={"host": "evil.example:8080"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden_host"
    assert "evil.example" in response.json()["error"]["message"]


def test_rebinding_host_on_the_right_port_is_refused(client: TestClient) -> None:
    response = client.get("/health", headers={"host": "attacker.test:8080"})
    assert response.status_code == 403


def test_foreign_host_is_refused_in_anthropic_shape(client: TestClient) -> None:
    response = client.post(MESSAGES, json={}, headers={"host": "evil.example"})
    assert response.status_code == 403
    assert response.json() == {
        "type": "error",
        "error": {"type": "permission_error", "message": response.json()["error"]["message"]},
    }


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080"])
def test_local_hosts_are_served(client: TestClient, host: str) -> None:
    assert client.get("/health", headers={"host": host}).status_code == 200


def test_wrong_port_in_host_is_refused(client: TestClient) -> None:
    assert client.get("/health", headers={"host": "127.0.0.1:9999"}).status_code == 403


def test_allow_host_admits_a_load_balancers_name_and_nothing_more() -> None:
    with make_client(allow_host=("pooled.internal:8080", "pooled-lb")) as client:
        for host in ("pooled.internal:8080", "Pooled.Internal:8080", "pooled-lb", "127.0.0.1:8080"):
            assert client.get("/health", headers={"host": host}).status_code == 200, host
        for host in ("pooled.internal:9090", "pooled-lb:8080", "evil.example:8080"):
            assert client.get("/health", headers={"host": host}).status_code == 403, host


@pytest.mark.parametrize("origin", ["http://127.0.0.1:8080", "http://localhost:8080"])
def test_own_origin_may_post(client: TestClient, origin: str) -> None:
    response = client.post(CHAT, json=CHAT_BODY, headers={"origin": origin})
    assert response.status_code == 503  # past the guards, into the route (the stub model has no engine)


@pytest.mark.parametrize("origin", ["https://evil.example", "http://127.0.0.1:9999", "null"])
def test_other_origins_are_refused(client: TestClient, origin: str) -> None:
    response = client.post(CHAT, json=CHAT_BODY, headers={"origin": origin})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden_origin"


def test_allowed_origin_gets_cors_preflight_and_headers() -> None:
    with make_client(allow_origin=("https://ui.example",)) as client:
        preflight = client.options(
            CHAT,
            headers={"origin": "https://ui.example", "access-control-request-method": "POST"},
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "https://ui.example"
        assert "authorization" in preflight.headers["access-control-allow-headers"]
        response = client.post(CHAT, json=CHAT_BODY, headers={"origin": "https://ui.example"})
        assert response.headers["access-control-allow-origin"] == "https://ui.example"


def test_preflight_from_an_unlisted_origin_is_refused(client: TestClient) -> None:
    response = client.options(CHAT, headers={"origin": "https://ui.example", "access-control-request-method": "POST"})
    assert response.status_code == 403
    assert "access-control-allow-origin" not in response.headers


def test_missing_token_is_401_in_each_shape(keyed: TestClient) -> None:
    openai = keyed.post(CHAT, json=CHAT_BODY)
    assert openai.status_code == 401
    assert openai.json()["error"]["type"] == "authentication_error"
    anthropic = keyed.post(MESSAGES, json={})
    assert anthropic.status_code == 401
    assert anthropic.json()["error"]["type"] == "authentication_error"


def test_wrong_token_is_401(keyed: TestClient) -> None:
    assert keyed.get("/v1/models", headers={"authorization": "Bearer nope"}).status_code == 401


@pytest.mark.parametrize("header", [{"authorization": "Bearer sekrit"}, {"x-api-key": "sekrit"}])
def test_token_is_accepted_either_way(keyed: TestClient, header: dict[str, str]) -> None:
    assert keyed.get("/v1/models", headers=header).status_code == 200


def test_health_without_token_says_only_ok(keyed: TestClient) -> None:
    assert keyed.get("/health").json() == {"ok": True}
    full = keyed.get("/health", headers={"x-api-key": "sekrit"}).json()
    assert full["ready"] is True and full["model"] == "pooled/tiny-test"


def test_docs_and_spec_need_no_token(keyed: TestClient) -> None:
    assert keyed.get("/v1/docs/").status_code == 200
    assert keyed.get("/v1/openapi.json").status_code == 200


def test_metrics_need_the_token(keyed: TestClient) -> None:
    assert keyed.get("/metrics").status_code == 401
    assert keyed.get("/metrics", headers={"x-api-key": "sekrit"}).status_code == 200


def test_declared_oversized_body_is_413_before_parsing() -> None:
    with make_client(max_body=1000) as client:
        response = client.post(CHAT, content=b"{" * 2000, headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
        anthropic = client.post(MESSAGES, content=b"x" * 2000, headers={"content-type": "application/json"})
        assert anthropic.status_code == 413
        assert anthropic.json()["error"]["type"] == "request_too_large"


def test_streamed_oversized_body_without_length_is_413() -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b" " * 300

    with make_client(max_body=1000) as client:
        response = client.post(CHAT, content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_default_body_limit_is_4_mib() -> None:
    assert Settings().max_body == 4 * 1024 * 1024


def _operations(client: TestClient) -> list[tuple[str, str]]:
    document = client.get("/v1/openapi.json").json()
    return [
        (method.upper(), path.replace("{response_id}", "resp_x").replace("{model_id}", "m").replace("{asset}", "x"))
        for path, item in document["paths"].items()
        for method in item
        if method in ("get", "post", "put", "delete", "patch")
    ]


@pytest.mark.parametrize(
    "credentials",
    [{}, {"authorization": "Bearer nope"}, {"x-api-key": "nope"}],
    ids=["missing", "wrong bearer", "wrong x-api-key"],
)
def test_every_route_but_health_and_docs_refuses_a_bad_key(keyed: TestClient, credentials: dict[str, str]) -> None:
    refused = []
    for method, path in _operations(keyed):
        response = keyed.request(method, path, headers=credentials, json={})
        if is_public(path):
            assert response.status_code != 401, (method, path)
            continue
        assert response.status_code == 401, (method, path, response.status_code)
        body = response.json()
        anthropic = path.startswith("/v1/messages") or (path.startswith("/v1/models") and "x-api-key" in credentials)
        assert (body.get("type") == "error") == anthropic, (method, path, body)
        assert body["error"]["type"] == "authentication_error", (method, path, body)
        refused.append(path)
    assert "/v1/chat/completions" in refused and "/v1/messages/count_tokens" in refused and "/metrics" in refused
