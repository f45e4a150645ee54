"""Which encoder an embeddings or rerank request goes to (handlers/encoder_calls.py), with a model
beside the chat model that did not load: its routes answer 503 naming why, and another kind of
encoder does not stand in for it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from handlers.api_error import ApiError
from handlers.context import FailedPart
from handlers.encoder_calls import choose_encoder
from tests.conftest import StubModel

RERANK_AND_COSINE = ["rerank", "embedding"]  # what /v1/rerank takes, in that order


def test_a_failed_rerank_model_is_a_503_though_an_embedding_model_could_rank() -> None:
    embedder = SimpleNamespace(kind="embedding")
    failed = FailedPart("rerank", "rerank_model", "/models/reranker", "config.json is not JSON")
    model = StubModel(encoders={"pooled/embedder": embedder}, failed_parts=[failed])
    with pytest.raises(ApiError) as refused:
        choose_encoder(model, None, RERANK_AND_COSINE)
    assert (refused.value.status, refused.value.code) == (503, "model_failed")
    assert "--rerank-model /models/reranker" in refused.value.message
    assert "config.json is not JSON" in refused.value.message
    assert choose_encoder(model, None, ["embedding"]) == ("pooled/embedder", embedder)


def test_a_failed_embedding_model_leaves_rerank_to_the_cross_encoder() -> None:
    reranker = SimpleNamespace(kind="rerank")
    failed = FailedPart("embedding", "embedding_model", "/models/embedder", "truncated")
    model = StubModel(encoders={"pooled/reranker": reranker}, failed_parts=[failed])
    assert choose_encoder(model, None, RERANK_AND_COSINE) == ("pooled/reranker", reranker)
    with pytest.raises(ApiError) as refused:
        choose_encoder(model, None, ["embedding"])
    assert refused.value.status == 503 and "--embedding-model /models/embedder" in refused.value.message


def test_without_any_encoder_it_is_still_the_400_naming_the_flags() -> None:
    with pytest.raises(ApiError) as refused:
        choose_encoder(StubModel(), None, RERANK_AND_COSINE)
    assert refused.value.status == 400 and "--rerank-model or --embedding-model" in refused.value.message
