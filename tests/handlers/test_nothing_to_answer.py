"""A request with nothing to answer is a 400 in its API's shape, and the engine never sees it."""

import pytest
from fastapi.testclient import TestClient

from tests.fake_engine import FakeEngine

CASES = [
    ("/v1/responses", {}, "input"),
    ("/v1/responses", {"model": "x", "instructions": "Be brief."}, "input"),
    ("/v1/responses", {"model": "x", "input": []}, "input"),
    ("/v1/chat/completions", {"model": "x", "messages": []}, "messages"),
    ("/v1/completions", {"model": "x", "prompt": ""}, "prompt"),
    ("/v1/completions", {"model": "x", "prompt": []}, "prompt"),
    ("/v1/messages", {"model": "x", "messages": [], "max_tokens": 8}, "messages"),
]


@pytest.mark.parametrize(("path", "body", "param"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_nothing_to_answer_is_400(api: TestClient, fake_engine: FakeEngine, path: str, body: dict, param: str) -> None:
    response = api.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert param in str(error.get("param") or error["message"])
    assert fake_engine.submitted == []
