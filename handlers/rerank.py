"""`POST /v1/rerank` (also `/rerank` and `/v2/rerank`) in the Cohere/Jina shape that vLLM and
llama-server serve.

A cross-encoder (`--rerank-model`) scores each (query, document) pair: the relevance score is
the sigmoid of its logit, as sentence-transformers' CrossEncoder gives. Without one, an embedding
model (`--embedding-model`) scores by the cosine similarity of the query's and each document's
embeddings. A pair or text over the model's limit is cut to it (the longer part first), since
documents are routinely longer than a reranker reads.
"""

from __future__ import annotations

import uuid

import numpy as np
from fastapi import Request

from generated import models
from handlers.context import context
from handlers.encoder_calls import check_count, choose_encoder, encode, serving_model


async def create_rerank(request: Request, body: models.RerankRequest) -> models.RerankResponse:
    model = await serving_model(request)
    name, encoder = choose_encoder(model, body.model, ["rerank", "embedding"])
    documents = [d if isinstance(d, str) else d.text for d in body.documents]
    check_count(len(documents), context(request).limits.max_embedding_inputs, "documents")
    limit = encoder.max_tokens
    if encoder.kind == "rerank":
        encoded = await encode(model, name, [encoder.inputs.encode_pair(body.query, d, limit) for d in documents])
        scores = 1.0 / (1.0 + np.exp(-encoded.values.astype(np.float64)))
    else:
        texts = [body.query, *documents]
        encoded = await encode(model, name, [encoder.inputs.encode_text(t, limit) for t in texts])
        vectors = encoded.values / np.maximum(np.linalg.norm(encoded.values, axis=-1, keepdims=True), 1e-12)
        scores = vectors[1:] @ vectors[0]
    order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))[: body.top_n or len(documents)]
    with_documents = body.return_documents is not False
    results = [
        models.RerankResult(
            index=i, relevance_score=float(scores[i]), document=models.RerankDocument(text=documents[i])
        )
        if with_documents
        else models.RerankResult(index=i, relevance_score=float(scores[i]))
        for i in order
    ]
    return models.RerankResponse(
        id=f"rerank-{uuid.uuid4().hex}",
        model=name,
        results=results,
        usage=models.RerankUsage(total_tokens=encoded.prompt_tokens),
    )


create_rerank_unversioned = create_rerank  # POST /rerank
create_rerank_v2 = create_rerank  # POST /v2/rerank
