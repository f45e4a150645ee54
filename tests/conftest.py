"""Shared fixtures: the app with a stand-in model service, for tests of the HTTP layer alone.

Tests of the engine and end-to-end tests use the real model; here the model
side is a plain object whose state a test sets, which is all the HTTP layer
reads.

For the whole run: the persistent XLA cache that `pooled serve` keeps (`$POOLED_CACHE_DIR`/xla)
holds the programs of the engines tests build in-process too; XLA compiles them, in this process and
in every `pooled serve` it starts, without LLVM's optimisation passes (TEST_XLA_FLAGS); and every
test under tests/e2e and tests/ui is marked `server` (it drives a real `pooled serve`; see
docs/testing.md).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from handlers.context import FailedPart, ModelState, ReleasedMemory
from pooled.configuration.settings import Settings
from pooled.hosting.loading import use_compilation_cache
from pooled.web.app import build_app, server_context

BASE_URL = "http://127.0.0.1:8080"
TESTS = Path(__file__).resolve().parent
SERVER_FOLDERS = {TESTS / "e2e", TESTS / "ui"}  # every test in them drives a real `pooled serve`
# A test runs each program a few times, so compiling is most of what it costs: without LLVM's
# passes an engine compiles about a third faster (and its steps run slower, by up to half on a
# decode step). Speed is all a test gives up: it compares answers with others from the same run
# (same flags) or with the goldens within their tolerances, and the dots are library calls that
# the flag does not touch. `make bench` and `pooled serve` keep XLA's default.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"


def pytest_configure(config: pytest.Config) -> None:
    # A run started in the background (`make test &`) inherits Ctrl-C ignored, and a process
    # started with it ignored keeps it so: the CLI processes that tests/http/test_model_commands.py
    # interrupts would finish their downloads. A handler of our own is reset to the default in
    # every child, which then takes Ctrl-C as a user's terminal sends it.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Read when jax starts its CPU backend (the first array, after this) and inherited by every
    # server a test starts (tests/pooled_servers.py passes the environment on).
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()
    use_compilation_cache()  # before any test compiles


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent in SERVER_FOLDERS:
            item.add_marker(pytest.mark.server)


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
    speech: Any = None
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
