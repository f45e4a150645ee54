"""`--rate-limit-rpm`: model requests past the limit in a minute are 429 in each API's shape with
Retry-After, per API key (per client address without one); other paths never count."""

from __future__ import annotations

import anthropic
import openai
import pytest
from fastapi.testclient import TestClient

from engine.checkpoints import read_gguf_metadata
from handlers.context import Counters
from pooled.configuration.settings import Settings
from pooled.hosting.model_host import default_model_path
from pooled.web.app import build_app, server_context
from pooled.web.rate_limit import RateLimit
from tests.conftest import BASE_URL, StubModel
from tests.fake_engine import FakeEngine
from text import ChatTemplate, Tokenizer

CHAT = "/v1/chat/completions"
CHAT_BODY = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
MESSAGES = "/v1/messages"
MESSAGES_BODY = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}


def limited_client(rpm: int, model: StubModel | None = None) -> TestClient:
    settings = Settings(rate_limit_rpm=rpm)
    return TestClient(build_app(settings, server_context(settings, model or StubModel())), base_url=BASE_URL)


def serving_model() -> StubModel:
    """The default model's tokenizer and chat template over a scripted engine: requests are answered."""
    metadata = read_gguf_metadata(default_model_path(), prefix="tokenizer.")
    tokenizer = Tokenizer.from_gguf_metadata(metadata)
    engine = FakeEngine(lambda request, row: tokenizer.encode("Hi."), tokenizer.vocab_size)
    template = ChatTemplate(metadata["tokenizer.chat_template"], tokenizer)
    return StubModel(engine=engine, tokenizer=tokenizer, chat_template=template)


def test_past_the_limit_a_request_is_429_with_retry_after_in_each_apis_shape() -> None:
    with limited_client(2) as client:
        assert [client.post(CHAT, json=CHAT_BODY).status_code != 429 for _ in range(2)] == [True, True]
        refused = client.post(CHAT, json=CHAT_BODY)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert "--rate-limit-rpm" in refused.json()["error"]["message"]
        assert 1 <= int(refused.headers["retry-after"]) <= 60

        anthropic = client.post(MESSAGES, json=MESSAGES_BODY, headers={"anthropic-version": "2023-06-01"})
        assert anthropic.status_code == 429 and anthropic.json()["error"]["type"] == "rate_limit_error"

        assert client.get("/health").status_code == 200  # not a model request: never limited
        metrics = client.get("/metrics").json()
        assert metrics["requests_rate_limited_total"] == 2 and metrics["requests_served_total"] == 2


def test_each_api_key_has_its_own_window() -> None:
    with limited_client(1) as client:
        assert client.post(CHAT, json=CHAT_BODY, headers={"authorization": "Bearer one"}).status_code != 429
        assert client.post(CHAT, json=CHAT_BODY, headers={"authorization": "Bearer one"}).status_code == 429
        assert client.post(CHAT, json=CHAT_BODY, headers={"x-api-key": "two"}).status_code != 429
        assert client.post(CHAT, json=CHAT_BODY).status_code != 429  # no key: the client's address


def test_a_request_counts_for_one_minute_from_its_start() -> None:
    limit = RateLimit(app=None, requests_per_minute=2, counters=Counters())  # type: ignore[arg-type]
    assert limit._admit("c", 0.0) is None and limit._admit("c", 10.0) is None
    assert limit._admit("c", 20.5) == 40  # the first leaves the window at 60 s
    assert limit._admit("c", 60.0) is None  # it has left
    assert limit._admit("c", 61.0) == 9  # the one at 10 s leaves at 70 s; refusals are not counted


def test_the_official_sdks_read_the_refusal_as_their_rate_limit_error() -> None:
    """What a client sees: the OpenAI SDK's and the Anthropic SDK's own RateLimitError, with the
    Retry-After they would wait (retries off, so the refusal reaches the caller)."""
    with limited_client(1, serving_model()) as client:
        openai_client = openai.OpenAI(base_url=f"{BASE_URL}/v1", api_key="k", http_client=client, max_retries=0)
        openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
        with pytest.raises(openai.RateLimitError) as refused:
            openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
        assert refused.value.code == "rate_limit_exceeded" and int(refused.value.response.headers["retry-after"]) >= 1

        claude = anthropic.Anthropic(base_url=BASE_URL, api_key="k", http_client=client, max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as limited:
            claude.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "Hi"}])
        assert limited.value.status_code == 429 and int(limited.value.response.headers["retry-after"]) >= 1
