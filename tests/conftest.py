"""Shared fixtures: the app with a stand-in model service, for tests of the HTTP layer alone.

Tests of the engine and end-to-end tests use the real model; here the model
side is a plain object whose state a test sets, which is all the HTTP layer
reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from handlers.context import FailedPart, ModelState, ReleasedMemory
from pooled.configuration.settings import Settings
from pooled.web.app import build_app, server_context

BASE_URL = "http://127.0.0.1:8080"


@dataclass
class StubModel:
    """The ModelService protocol with settable fields."""

    state: ModelState = "serving"
    model_id: str = "pooled/tiny-test"
    kind: str = "chat"
    ctx: int | None = 2048
    trained_ctx: int | None = 2048
    rope_scaling: str | None = None
    quantization: str | None = "none"
    weight_formats: dict[str, int] | None = None
    progress: dict[str, Any] | None = None
    failure: tuple[str, str] | None = None
    decode_lanes: int = 4
    engine: Any = None
    tokenizer: Any = None
    chat_template: Any = None
    encoders: dict[str, Any] = field(default_factory=dict)
    adapters: Any = None
    switch_failure: tuple[str, str] | None = None
    failed_parts: list[FailedPart] = field(default_factory=list)
    released: ReleasedMemory | None = None

    def wake(self) -> None:
        return None


@pytest.fixture
def model() -> StubModel:
    return StubModel()


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture
def client(settings: Settings, model: StubModel) -> Iterator[TestClient]:
    app = build_app(settings, server_context(settings, model))
    with TestClient(app, base_url=BASE_URL, raise_server_exceptions=False) as test_client:
        yield test_client
