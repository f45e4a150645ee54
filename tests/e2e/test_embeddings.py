"""`/v1/embeddings` and `/v1/rerank` on the real server, with the tiny random encoders beside the
chat model: the numbers sentence-transformers gives (goldens), through the OpenAI SDK and plain HTTP."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from openai import OpenAI

from tests.e2e.conftest import EMBEDDING_ENCODER, RERANK_ENCODER
from tests.engine.tiny_encoders import QUERY, SENTENCES

GOLDENS = Path(__file__).parent.parent / "goldens" / "tiny_encoders"


def golden(name: str, key: str) -> np.ndarray:
    return np.array(json.loads((GOLDENS / f"{name}.json").read_text())[key], np.float32)


def test_models_lists_the_chat_model_and_both_encoders(client: OpenAI) -> None:
    kinds = {model.id: (model.model_extra or {})["kind"] for model in client.models.list().data}
    assert sorted(kinds.values()) == ["chat", "embedding", "rerank"]
    assert kinds[f"pooled/{EMBEDDING_ENCODER}"] == "embedding" and kinds[f"pooled/{RERANK_ENCODER}"] == "rerank"
    assert client.models.retrieve(f"pooled/{EMBEDDING_ENCODER}").max_model_len == 48  # type: ignore[attr-defined]


def test_the_sdk_reads_embeddings_equal_to_sentence_transformers(client: OpenAI) -> None:
    answer = client.embeddings.create(model=f"pooled/{EMBEDDING_ENCODER}", input=list(SENTENCES))
    got = np.array([item.embedding for item in answer.data], np.float32)
    np.testing.assert_allclose(got, golden(EMBEDDING_ENCODER, "embeddings"), atol=1e-5)
    assert [item.index for item in answer.data] == list(range(len(SENTENCES)))
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > len(SENTENCES)
    # The SDK asks for base64 when no format is given and decodes it; floats on request are the same.
    floats = client.embeddings.create(model="any", input=SENTENCES[0], encoding_format="float")
    np.testing.assert_allclose(floats.data[0].embedding, got[0], atol=1e-7)


def test_base64_token_ids_and_truncation(server: str) -> None:
    def post(body: dict[str, object]) -> httpx.Response:
        return httpx.post(f"{server}/v1/embeddings", json=body, timeout=60)

    text = post({"input": "the cat sat", "encoding_format": "float"}).json()
    packed = post({"input": "the cat sat", "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), "<f4")
    np.testing.assert_array_equal(decoded, np.array(text["data"][0]["embedding"], np.float32))
    ids = post({"input": [[2, 40, 41, 3], [2, 42, 3]]}).json()
    assert [len(item["embedding"]) for item in ids["data"]] == [32, 32] and ids["usage"]["prompt_tokens"] == 7

    long_text = " ".join(["cat"] * 60)
    refused = post({"input": ["blue", long_text]})
    assert refused.status_code == 400
    assert "input 1 has 62 tokens" in refused.json()["error"]["message"] and "at most 48" in refused.text
    cut = post({"input": long_text, "truncate_prompt_tokens": -1}).json()
    assert cut["usage"]["prompt_tokens"] == 48
    no_dimensions = post({"input": "blue", "dimensions": 8})
    assert no_dimensions.status_code == 400 and no_dimensions.json()["error"]["param"] == "dimensions"
    empty = post({"input": []})
    assert empty.status_code == 400 and empty.json()["error"]["type"] == "invalid_request_error"


def test_embeddings_with_the_sdk_errors_are_bad_requests(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="any", input=" ".join(["dog"] * 80))


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_rerank_scores_as_the_cross_encoder_best_first(server: str, path: str) -> None:
    documents = [SENTENCES[0], {"text": SENTENCES[1]}, *SENTENCES[2:]]
    answer = httpx.post(f"{server}{path}", json={"query": QUERY, "documents": documents}, timeout=60)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = golden(RERANK_ENCODER, "scores")
    results = body["results"]
    assert [r["index"] for r in results] == sorted(range(len(SENTENCES)), key=lambda i: -expected[i])
    np.testing.assert_allclose([r["relevance_score"] for r in results], np.sort(expected)[::-1], atol=1e-5)
    assert results[0]["document"]["text"] == SENTENCES[results[0]["index"]]
    assert body["model"] == f"pooled/{RERANK_ENCODER}" and body["id"].startswith("rerank-")
    assert body["usage"]["total_tokens"] > 0

    top = httpx.post(
        f"{server}{path}",
        json={"query": QUERY, "documents": list(SENTENCES), "top_n": 2, "return_documents": False},
        timeout=60,
    ).json()["results"]
    assert [r["index"] for r in top] == [r["index"] for r in results[:2]] and "document" not in top[0]


def test_rerank_by_an_embedding_model_is_its_cosine_similarity(server: str) -> None:
    answer = httpx.post(
        f"{server}/v1/rerank",
        json={"model": f"pooled/{EMBEDDING_ENCODER}", "query": QUERY, "documents": list(SENTENCES)},
        timeout=60,
    ).json()
    vectors = {
        text: np.array(item["embedding"])
        for text, item in zip(
            [QUERY, *SENTENCES],
            httpx.post(f"{server}/v1/embeddings", json={"input": [QUERY, *SENTENCES]}, timeout=60).json()["data"],
            strict=True,
        )
    }
    for result in answer["results"]:
        cosine = vectors[QUERY] @ vectors[SENTENCES[result["index"]]]  # unit vectors
        assert result["relevance_score"] == pytest.approx(cosine, abs=1e-5)


def test_a_long_document_is_cut_to_what_the_reranker_reads(server: str) -> None:
    answer = httpx.post(
        f"{server}/v1/rerank", json={"query": QUERY, "documents": [" ".join(["cat"] * 200), "paris"]}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["total_tokens"] <= 2 * 48


def test_the_banner_names_each_encoder_and_its_route(server: str) -> None:
    banner = httpx.get(f"{server}/").text
    assert f"Embeddings: pooled/{EMBEDDING_ENCODER} at {server}/v1/embeddings" in banner
    assert f"Rerank: pooled/{RERANK_ENCODER} at {server}/v1/rerank" in banner
