"""`GET /v1/models` and `GET /v1/models/{model_id}` in OpenAI's or Anthropic's shape.

Anthropic's shape answers a request with an `anthropic-version` header, or with
`x-api-key` and no `Authorization` (how Anthropic's SDKs authenticate); the
list is empty until the model is ready, as clients then know to wait.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Request

from generated import models
from handlers.context import ServerContext, context
from handlers.errors import ApiError


def wants_anthropic(request: Request) -> bool:
    headers = request.headers
    return "anthropic-version" in headers or ("x-api-key" in headers and "authorization" not in headers)


def _openai_model(server: ServerContext) -> models.OpenAIModel:
    return models.OpenAIModel(
        id=server.model.model_id,
        kind="chat",
        object="model",
        created=server.created,
        owned_by="pooled",
        max_model_len=server.model.ctx or 1,
        decode_lanes=server.model.decode_lanes,
    )


def _adapter_names(server: ServerContext) -> list[str]:
    adapters = server.model.adapters
    return [entry.name for entry in adapters.listing() if entry.state == "ready"] if adapters is not None else []


def _openai_adapters(server: ServerContext) -> list[models.OpenAIModel]:
    """The LoRA adapters requests may name as their `model`, each with the model it adapts."""
    base = _openai_model(server)
    return [base.model_copy(update={"id": name, "parent": base.id}) for name in _adapter_names(server)]


def _openai_encoders(server: ServerContext) -> list[models.OpenAIModel]:
    """The encoders served beside the model; the chat model's own embedding pass (`--embeddings`)
    is listed once, as the chat model."""
    chat_id = server.model.model_id if server.model.kind == "chat" else None
    return [
        models.OpenAIModel(
            id=name,
            kind=encoder.kind,
            object="model",
            created=server.created,
            owned_by="pooled",
            max_model_len=encoder.max_tokens,
        )
        for name, encoder in server.model.encoders.items()
        if name != chat_id
    ]


def _anthropic_model(server: ServerContext, name: str | None = None) -> models.AnthropicModelInfo:
    """The served model, or the adapter `name` on it."""
    return models.AnthropicModelInfo(
        type="model",
        id=name or server.model.model_id,
        display_name=name or server.model.model_id,
        created_at=datetime.fromtimestamp(server.created, UTC),
        lifecycle="active",
        max_model_len=server.model.ctx or 1,
    )


async def list_models(request: Request) -> models.OpenAIModelList | models.AnthropicModelList:
    server = context(request)
    ready = server.model.state == "serving"
    if wants_anthropic(request):
        names = [None, *_adapter_names(server)] if ready else []
        entries = [_anthropic_model(server, name) for name in names]
        first, last = (entries[0].id, entries[-1].id) if entries else (None, None)
        return models.AnthropicModelList(data=entries, has_more=False, first_id=first, last_id=last)
    if not ready:
        return models.OpenAIModelList(object="list", data=[])
    chat = [_openai_model(server), *_openai_adapters(server)] if server.model.kind == "chat" else []
    return models.OpenAIModelList(object="list", data=[*chat, *_openai_encoders(server)])


async def retrieve_model(request: Request, model_id: str) -> models.OpenAIModel | models.AnthropicModelInfo:
    server = context(request)
    if server.model.state == "serving" and model_id in _adapter_names(server):
        if wants_anthropic(request):
            return _anthropic_model(server, model_id)
        return next(m for m in _openai_adapters(server) if m.id == model_id)
    if server.model.state == "serving" and not wants_anthropic(request):
        encoder = next((m for m in _openai_encoders(server) if m.id == model_id), None)
        if encoder is not None:
            return encoder
    if server.model.state != "serving" or model_id != server.model.model_id or server.model.kind != "chat":
        raise ApiError(
            404, f"No model '{model_id}'; this server serves '{server.model.model_id}'.", code="model_not_found"
        )
    return _anthropic_model(server) if wants_anthropic(request) else _openai_model(server)
