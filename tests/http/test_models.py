"""`/v1/models` in both shapes: the served context is in each."""

import pytest
from fastapi.testclient import TestClient

from tests.conftest import StubModel

ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.mark.parametrize("headers", [{}, ANTHROPIC], ids=["openai", "anthropic"])
def test_both_shapes_carry_max_model_len(client: TestClient, model: StubModel, headers: dict[str, str]) -> None:
    listed = client.get("/v1/models", headers=headers)
    assert listed.status_code == 200
    entry = listed.json()["data"][0]
    assert entry["max_model_len"] == model.ctx == 2048
    retrieved = client.get(f"/v1/models/{entry['id']}", headers=headers).json()
    assert retrieved["max_model_len"] == 2048
