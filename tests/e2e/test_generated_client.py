"""A client generated from the served `/v1/openapi.json` by `openapi-python-client` reads a chat
completion, embeddings and a rerank: the spec is complete enough for a generator that never saw
pooled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

PACKAGE = "pooled_generated_client"


def test_generated_client_reads_chat_embeddings_and_rerank(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "openapi.json"
    spec.write_bytes(httpx.get(f"{server}/v1/openapi.json", timeout=30).content)
    generator = Path(sys.executable).parent / "openapi-python-client"
    subprocess.run(
        [str(generator), "generate", "--path", str(spec), "--meta", "none", "--output-path", str(tmp_path / PACKAGE)],
        check=True,
        cwd=tmp_path,
        capture_output=True,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    generated: Any = __import__(PACKAGE, fromlist=["Client"])
    from pooled_generated_client.api.open_ai import create_chat_completion, create_embedding, create_rerank
    from pooled_generated_client.models import (
        ChatCompletion,
        ChatCompletionRequest,
        EmbeddingRequest,
        EmbeddingResponse,
        RerankRequest,
        RerankResponse,
    )

    body = ChatCompletionRequest.from_dict(
        {"model": "any", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 12}
    )
    with generated.Client(base_url=server, timeout=httpx.Timeout(600)) as client:
        answer = create_chat_completion.sync(client=client, body=body)
        embedded = create_embedding.sync(client=client, body=EmbeddingRequest.from_dict({"input": ["a", "b"]}))
        ranked = create_rerank.sync(
            client=client, body=RerankRequest.from_dict({"query": "cat", "documents": ["the cat", "a dog"]})
        )
    assert isinstance(answer, ChatCompletion), answer
    assert answer.choices[0].message.content
    assert answer.usage.completion_tokens > 0
    assert isinstance(embedded, EmbeddingResponse), embedded
    assert [item.index for item in embedded.data] == [0, 1]
    assert isinstance(ranked, RerankResponse), ranked
    assert sorted(result.index for result in ranked.results) == [0, 1]
