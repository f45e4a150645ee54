"""Integer, boolean and number fields take only JSON integers, booleans and numbers: "16", "true"
or a boolean for a number is a 400 in the route's API shape, never coerced (a number field still
takes an integer). Unknown fields stay accepted (tests/http/test_errors.py)."""

import pytest
from fastapi.testclient import TestClient

MESSAGES = [{"role": "user", "content": "Hi"}]
# (path, a valid body, the field to spoil, a JSON value of the wrong type)
CASES = [
    ("/v1/chat/completions", {"model": "x", "messages": MESSAGES}, "max_tokens", "16"),
    ("/v1/chat/completions", {"model": "x", "messages": MESSAGES}, "n", 2.5),
    ("/v1/chat/completions", {"model": "x", "messages": MESSAGES}, "stream", "true"),
    ("/v1/chat/completions", {"model": "x", "messages": MESSAGES}, "logprobs", 1),
    ("/v1/chat/completions", {"model": "x", "messages": MESSAGES}, "presence_penalty", False),
    ("/v1/chat/completions", {"model": "x", "messages": MESSAGES}, "temperature", "0.5"),
    ("/v1/completions", {"model": "x", "prompt": "Hi"}, "max_tokens", "16"),
    ("/v1/completions", {"model": "x", "prompt": "Hi"}, "echo", "false"),
    ("/v1/responses", {"model": "x", "input": "Hi"}, "max_output_tokens", "16"),
    ("/v1/responses", {"model": "x", "input": "Hi"}, "store", "false"),
    ("/v1/messages", {"model": "x", "messages": MESSAGES, "max_tokens": 16}, "max_tokens", "16"),
    ("/v1/messages", {"model": "x", "messages": MESSAGES, "max_tokens": 16}, "stream", 0),
    ("/v1/messages", {"model": "x", "messages": MESSAGES, "max_tokens": 16}, "top_p", True),
    ("/v1/tokenize", {"prompt": "Hi"}, "add_special_tokens", "true"),
]


@pytest.mark.parametrize(("path", "body", "field", "value"), CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_a_wrong_json_type_is_400(client: TestClient, path: str, body: dict, field: str, value: object) -> None:
    response = client.post(path, json={**body, field: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert field in str(error.get("param") or error["message"])
    if path.startswith("/v1/messages"):
        assert response.json()["type"] == "error"


def test_a_number_field_takes_an_integer(client: TestClient) -> None:
    # Past validation, the stand-in model (no engine) answers 503; a wrong type would be a 400 first.
    response = client.post("/v1/chat/completions", json={"model": "x", "messages": MESSAGES, "temperature": 1})
    assert response.status_code == 503 and response.json()["error"]["code"] == "model_not_ready", response.text
