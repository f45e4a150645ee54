"""Every error status leaves in its API's own shape, never in FastAPI's default one."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from pooled.web import error_bodies
from tests.conftest import BASE_URL, StubModel

CHAT = "/v1/chat/completions"
CHAT_BODY = {"messages": [{"role": "user", "content": "Hi"}]}
OPENAI_KEYS = {"message", "type", "param", "code"}


def openai_error(response: object) -> dict[str, object]:
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and set(body["error"]) == OPENAI_KEYS
    return body["error"]  # type: ignore[no-any-return]


def anthropic_error(response: object) -> dict[str, object]:
    body = response.json()  # type: ignore[attr-defined]
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    return body["error"]  # type: ignore[no-any-return]


def test_unknown_path_is_404(client: TestClient) -> None:
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert openai_error(response)["type"] == "not_found_error"


def test_unknown_anthropic_path_is_404_in_anthropic_shape(client: TestClient) -> None:
    response = client.post("/v1/messages/batches", json={})
    assert response.status_code == 404
    assert anthropic_error(response)["type"] == "not_found_error"


def test_wrong_method_is_405_with_allow(client: TestClient) -> None:
    response = client.get(CHAT)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert openai_error(response)["code"] == "method_not_allowed"


@pytest.mark.parametrize("path", ["/v1/responses/compact", "/v1/images/generations", "/v1/audio/speech"])
def test_known_unserved_paths_are_404_saying_so(client: TestClient, path: str) -> None:
    response = client.post(path, json={})
    assert response.status_code == 404
    error = openai_error(response)
    assert error["code"] == "not_served" and "not served" in str(error["message"])


def test_validation_error_is_400_naming_the_field(client: TestClient) -> None:
    response = client.post(CHAT, json={"messages": "not a list"})
    assert response.status_code == 400
    error = openai_error(response)
    assert error["type"] == "invalid_request_error" and error["param"] == "messages"


def test_malformed_json_is_400(client: TestClient) -> None:
    response = client.post(CHAT, content=b'{"messages": [', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert "not valid JSON" in str(openai_error(response)["message"])


def test_anthropic_validation_error_is_400_in_anthropic_shape(client: TestClient) -> None:
    response = client.post("/v1/messages", json={"model": "x", "messages": []})
    assert response.status_code == 400
    assert anthropic_error(response)["type"] == "invalid_request_error"


def test_unknown_fields_are_accepted(client: TestClient) -> None:
    body = {**CHAT_BODY, "client_metadata": {"x": 1}, "some_future_field": True}
    response = client.post(CHAT, json=body)
    assert response.status_code == 503  # past validation; the stub model has no engine
    assert openai_error(response)["code"] == "model_not_ready"


def test_loading_model_is_503_with_retry_after(client: TestClient, model: StubModel) -> None:
    model.state = "loading"
    response = client.post(CHAT, json=CHAT_BODY)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert openai_error(response)["code"] == "model_not_ready"


def test_loading_model_is_529_on_anthropic_paths(client: TestClient, model: StubModel) -> None:
    model.state = "loading"
    response = client.post(
        "/v1/messages", json={"model": "x", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert response.status_code == 529
    assert response.headers["retry-after"] == "5"
    assert anthropic_error(response)["type"] == "overloaded_error"


def test_dead_model_is_503_naming_the_cause(client: TestClient, model: StubModel) -> None:
    model.state, model.failure = "dead", ("fault", "device lost")
    response = client.post(CHAT, json=CHAT_BODY)
    assert response.status_code == 503
    assert "device lost" in str(openai_error(response)["message"])


def test_crash_is_500_in_api_shape() -> None:
    app = FastAPI()
    error_bodies.install(app)

    @app.post("/v1/messages")
    async def boom() -> None:
        raise RuntimeError("kaboom")

    with TestClient(app, base_url=BASE_URL, raise_server_exceptions=False) as client:
        response = client.post("/v1/messages")
    assert response.status_code == 500
    error = anthropic_error(response)
    assert error["type"] == "api_error" and "kaboom" not in str(error["message"])


@pytest.mark.parametrize(
    ("status", "openai_type", "anthropic_type"),
    [
        (413, "invalid_request_error", "request_too_large"),
        (429, "rate_limit_error", "rate_limit_error"),
        (504, "timeout_error", "timeout_error"),
        (529, "server_error", "overloaded_error"),
    ],
)
def test_status_to_error_type(status: int, openai_type: str, anthropic_type: str) -> None:
    openai = error_bodies.error_response({"path": CHAT, "headers": []}, status, "m")
    anthropic = error_bodies.error_response({"path": "/v1/messages", "headers": []}, status, "m")
    assert openai.status_code == anthropic.status_code == status
    assert openai.body and f'"type":"{openai_type}"' in openai.body.decode()
    assert f'"type":"{anthropic_type}"' in anthropic.body.decode()
