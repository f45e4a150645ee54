"""`GET /v1/models` and `GET /v1/models/{model_id}` in OpenAI's or Anthropic's shape.

Anthropic's shape answers a request with an `anthropic-version` header, or with
`x-api-key` and no `Authorization` (how Anthropic's SDKs authenticate); the
list is empty until the model is ready, as clients then know to wait.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Request

from generated import models
from handlers.context import ServerContext, SwitchTarget, context
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
    base = _openai_model(server)  # without data[0]'s status
    return [base.model_copy(update={"id": name, "parent": base.id}) for name in _adapter_names(server)]


def _openai_encoders(server: ServerContext, own: bool = False) -> list[models.OpenAIModel]:
    """The encoders served beside the model (`own`: the encoder served as the model); the chat
    model's own embedding pass (`--embeddings`) is listed once, as the chat model."""
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
        if (name == server.model.model_id) == own
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


def served_model(server: ServerContext) -> models.OpenAIModel:
    """`data[0]`: the model served, loading or switched to, with its status."""
    model = server.model
    failed = model.switch_failure
    status = model.state if model.state in ("loading", "switching", "unloaded") else "failed" if failed else "serving"
    own = _openai_encoders(server, own=True) if model.kind != "chat" else []
    entry = own[0] if own else _openai_model(server)
    reason = {"reason": failed[1]} if failed else {}
    return entry.model_copy(update={"active": True, "status": status, **reason})


def _targets(server: ServerContext) -> list[SwitchTarget]:
    library = server.library
    return library.targets() if library is not None and library.implicit_switch else []


def _openai_target(server: ServerContext, target: SwitchTarget) -> models.OpenAIModel:
    entry = models.OpenAIModel(
        id=target.id,
        kind=target.kind,
        object="model",
        created=server.created,
        owned_by="pooled",
        max_model_len=target.trained_ctx or 1,
        available=target.available,
    )
    return entry.model_copy(update={"reason": target.reason}) if target.reason else entry


def _listed(server: ServerContext) -> bool:
    return server.model.state in ("serving", "switching", "unloaded")


async def list_models(request: Request) -> models.OpenAIModelList | models.AnthropicModelList:
    server = context(request)
    targets = _targets(server) if _listed(server) else []
    if wants_anthropic(request):
        names = [None, *_adapter_names(server), *(t.id for t in targets)] if _listed(server) else []
        entries = [_anthropic_model(server, name) for name in names]
        first, last = (entries[0].id, entries[-1].id) if entries else (None, None)
        return models.AnthropicModelList(data=entries, has_more=False, first_id=first, last_id=last)
    if not _listed(server):
        return models.OpenAIModelList(object="list", data=[])
    adapters = _openai_adapters(server) if server.model.kind == "chat" else []
    encoders = _openai_encoders(server)
    switchable = [_openai_target(server, target) for target in targets]
    return models.OpenAIModelList(object="list", data=[served_model(server), *adapters, *encoders, *switchable])


async def retrieve_model(request: Request, model_id: str) -> models.OpenAIModel | models.AnthropicModelInfo:
    server = context(request)
    anthropic = wants_anthropic(request)
    if _listed(server) and model_id == server.model.model_id:
        return _anthropic_model(server) if anthropic else served_model(server)
    if _listed(server) and model_id in _adapter_names(server):
        return (
            _anthropic_model(server, model_id)
            if anthropic
            else next(m for m in _openai_adapters(server) if m.id == model_id)
        )
    if _listed(server) and not anthropic:
        listed = [*_openai_encoders(server), *(_openai_target(server, t) for t in _targets(server))]
        found = next((m for m in listed if m.id == model_id), None)
        if found is not None:
            return found
    if _listed(server) and anthropic and any(t.id == model_id for t in _targets(server)):
        return _anthropic_model(server, model_id)
    raise ApiError(404, f"No model '{model_id}'; this server serves '{server.model.model_id}'.", code="model_not_found")
