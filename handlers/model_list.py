"""`GET /v1/models` and `GET /v1/models/{model_id}` in OpenAI's or Anthropic's shape.

Anthropic's shape answers a request with an `anthropic-version` header, or with
`x-api-key` and no `Authorization` (how Anthropic's SDKs authenticate); the
list is empty until the model is ready, as clients then know to wait.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Request

from generated import models
from handlers.api_error import ApiError
from handlers.context import ServerContext, SwitchTarget, context


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


def _openai_speech(server: ServerContext) -> list[models.OpenAIModel]:
    """The speech model, when it can serve."""
    speech = server.model.speech
    if speech is None:
        return []
    return [
        models.OpenAIModel(
            id=speech.name,
            kind="speech",
            object="model",
            created=server.created,
            owned_by="pooled",
            max_model_len=speech.max_text_tokens,
        )
    ]


def speech_availability(server: ServerContext) -> models.SpeechAvailability:
    """Whether the audio routes can serve now, and why not."""
    model = server.model
    if not _listed(server):
        return models.SpeechAvailability(available=False, reason=f"The model is {model.state}.")
    if model.speech is not None:
        return models.SpeechAvailability(available=True)
    failed = next((part for part in model.failed_parts if part.kind == "speech"), None)
    reason = (
        f"The speech model (--speech-model {failed.path}) did not load: {failed.reason}"
        if failed is not None
        else "No speech model: start the server with --speech-model PATH (a Whisper model folder)."
    )
    return models.SpeechAvailability(available=False, reason=reason)


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
    if model.kind == "speech":
        own = _openai_speech(server)
    else:
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


def _listing(server: ServerContext) -> list[models.OpenAIModel]:
    if not _listed(server):
        return []
    adapters = _openai_adapters(server) if server.model.kind == "chat" else []
    switchable = [_openai_target(server, target) for target in _targets(server)]
    beside = _openai_speech(server) if server.model.kind != "speech" else []  # the model itself is data[0]
    return [served_model(server), *beside, *adapters, *_openai_encoders(server), *switchable]


def _anthropic_listing(server: ServerContext) -> list[models.AnthropicModelInfo]:
    """The served model, its adapters and the models a switch could serve (no encoders: Anthropic's
    API has no embeddings)."""
    if not _listed(server):
        return []
    names = [None, *_adapter_names(server), *(target.id for target in _targets(server))]
    return [_anthropic_model(server, name) for name in names]


async def list_models(request: Request) -> models.OpenAIModelList | models.AnthropicModelList:
    server = context(request)
    if wants_anthropic(request):
        entries = _anthropic_listing(server)
        first, last = (entries[0].id, entries[-1].id) if entries else (None, None)
        return models.AnthropicModelList(data=entries, has_more=False, first_id=first, last_id=last)
    return models.OpenAIModelList(object="list", data=_listing(server), speech=speech_availability(server))


async def retrieve_model(request: Request, model_id: str) -> models.OpenAIModel | models.AnthropicModelInfo:
    """Any model the listing in the same shape holds, by its id."""
    server = context(request)
    listed: list[models.OpenAIModel] | list[models.AnthropicModelInfo] = (
        _anthropic_listing(server) if wants_anthropic(request) else _listing(server)
    )
    found = next((entry for entry in listed if entry.id == model_id), None)
    if found is None:
        raise ApiError(
            404, f"No model '{model_id}'; this server serves '{server.model.model_id}'.", code="model_not_found"
        )
    return found
