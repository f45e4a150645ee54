"""Bodies no schema describes, on every operation that takes one: random bytes, truncated JSON, deep
nesting, huge strings and arrays, invalid UTF-8, JSON that is not an object, wrong content types.
Each is a 4xx in the route's API shape: never a 5xx, never a hang (the test's timeout), refused
before any work (nothing reaches the engine) and answered with one problem named, whatever the
body's size (none of it echoed, nothing rendered per item)."""

from __future__ import annotations

import json
import random

import pytest
from fastapi.testclient import TestClient

from tests.fake_engine import FakeEngine

JSON = {"content-type": "application/json"}
ANSWER_BYTES = 1024  # an error naming one problem; the bodies below are up to 3 MB


def _wrong_types(huge: object) -> dict[str, object]:
    """Every operation's main fields, each of a type it does not take, one of them `huge`."""
    return {"model": huge, "messages": 7, "prompt": 7, "input": 7, "tokens": "x", "query": 7, "documents": 7}


_random = random.Random(7)
BODIES: dict[str, tuple[bytes, dict[str, str]]] = {
    "random bytes": (bytes(_random.randrange(256) for _ in range(512)), JSON),
    "truncated": (b'{"model": "m", "messages": [{"role": "user", "content": "Hi', JSON),
    "deep nesting": (b'{"model": "m", "input": ' + b"[" * 20000 + b"]" * 20000 + b"}", JSON),
    "deep objects": (b'{"a": ' * 5000 + b"1" + b"}" * 5000, JSON),
    "invalid utf-8": (b'{"model": "m", "prompt": "\xff\xfe\xc3", "messages": "\xc3\x28"}', JSON),
    "not an object": (b"[1, 2, 3]", JSON),
    "null": (b"null", JSON),
    "a string": (b'"Hi"', JSON),
    "empty": (b"", JSON),
    "huge string": (json.dumps(_wrong_types(["a" * 3_000_000])).encode(), JSON),
    "huge array": (json.dumps(_wrong_types([[7]] * 300_000)).encode(), JSON),
    "text/plain": (b'{"model": "m", "prompt": "Hi"}', {"content-type": "text/plain"}),
    "form": (b"model=m&prompt=Hi", {"content-type": "application/x-www-form-urlencoded"}),
    "no content type": (b'{"model": "m"', {}),
}


def _post_operations(api: TestClient) -> list[str]:
    document = api.get("/v1/openapi.json").json()
    return sorted(path for path, item in document["paths"].items() if "post" in item and "{" not in path)


SLOW_BODIES = {"huge array"}  # 300,000 items checked on every operation: seconds each


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "kind", [pytest.param(kind, marks=pytest.mark.slow) if kind in SLOW_BODIES else kind for kind in sorted(BODIES)]
)
def test_malformed_bodies_are_4xx_in_the_routes_shape(api: TestClient, fake_engine: FakeEngine, kind: str) -> None:
    content, headers = BODIES[kind]
    for path in _post_operations(api):
        response = api.post(path, content=content, headers=headers)
        assert 400 <= response.status_code < 500, (path, response.status_code)
        body = response.json()
        if path.startswith("/v1/messages"):
            assert body["type"] == "error" and body["error"]["type"], (path, body)
        else:
            assert body["error"]["message"], (path, body)
        assert len(response.content) < ANSWER_BYTES, (path, len(response.content))
    assert fake_engine.submitted == []
