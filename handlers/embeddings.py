"""`POST /v1/embeddings` in OpenAI's shape, served by an embedding encoder on the engine thread.

`input` is a string, strings, token ids or arrays of token ids (used as they are). An input over
the encoder's limit is a 400 naming it, unless `truncate_prompt_tokens` (vLLM's field; -1 is the
encoder's limit) asks for its first tokens instead. `dimensions` keeps the first components of a
Matryoshka model's embeddings, scaled back to unit length if the model normalises; another model
answers 400.
"""

from __future__ import annotations

import base64

import numpy as np
from fastapi import Request

from engine.api import EncoderInput
from generated import models
from handlers.api_error import ApiError
from handlers.context import EncoderService, context
from handlers.encoder_calls import check_count, choose_encoder, encode, serving_model


async def create_embedding(request: Request, body: models.EmbeddingRequest) -> models.EmbeddingResponse:
    model = await serving_model(request)
    name, encoder = choose_encoder(model, body.model, ["embedding"])
    texts_or_tokens = _inputs(body.input)
    check_count(len(texts_or_tokens), context(request).limits.max_embedding_inputs, "input")
    truncate = _truncation(body.truncate_prompt_tokens, encoder)
    inputs = [_encoder_input(encoder, item, truncate) for item in texts_or_tokens]
    encoded = await encode(model, name, inputs)
    vectors = _dimensions(encoded.values, body.dimensions, name, encoder)
    data = [
        models.EmbeddingObject(object="embedding", index=i, embedding=_format(vector, body.encoding_format))
        for i, vector in enumerate(vectors)
    ]
    usage = models.EmbeddingUsage(prompt_tokens=encoded.prompt_tokens, total_tokens=encoded.prompt_tokens)
    return models.EmbeddingResponse(object="list", data=data, model=name, usage=usage)


def _inputs(value: str | list[str] | list[int] | list[list[int]]) -> list[str | list[int]]:
    if isinstance(value, str):
        return [value]
    if value and all(isinstance(item, int) for item in value):
        return [list(value)]  # type: ignore[arg-type]  # one array of token ids
    return list(value)  # type: ignore[arg-type]


def _truncation(value: int | None, encoder: EncoderService) -> int | None:
    if value is None:
        return None
    if value == 0:
        raise ApiError(
            400, "truncate_prompt_tokens is -1 (the model's limit) or a positive count.", param="truncate_prompt_tokens"
        )
    return encoder.max_tokens if value == -1 else min(value, encoder.max_tokens)


def _encoder_input(encoder: EncoderService, item: str | list[int], truncate: int | None) -> EncoderInput:
    if isinstance(item, str):
        return encoder.inputs.encode_text(item, truncate)
    return encoder.inputs.token_input(item[:truncate] if truncate is not None else item)


def _dimensions(values: np.ndarray, dimensions: int | None, name: str, encoder: EncoderService) -> np.ndarray:
    if dimensions is None:
        return values
    if not encoder.matryoshka:
        raise ApiError(
            400, f"Model '{name}' does not support dimensions: its embeddings cannot be truncated.", param="dimensions"
        )
    if dimensions > encoder.dimensions:
        raise ApiError(400, f"dimensions is {dimensions}; model '{name}' has {encoder.dimensions}.", param="dimensions")
    kept = values[:, :dimensions]
    if encoder.normalize:
        kept = kept / np.maximum(np.linalg.norm(kept, axis=-1, keepdims=True), 1e-12)
    return kept


def _format(vector: np.ndarray, encoding_format: str | None) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode()
    return [float(x) for x in vector]
