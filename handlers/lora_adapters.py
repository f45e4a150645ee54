"""`GET/POST /v1/lora_adapters` and `DELETE /v1/lora_adapters/{name}`: the served model's LoRA
adapters, listed, loaded and unloaded while it serves (pooled/hosting/adapter_admin.py does the work).

The routes need the API key like every `/v1` route, and answer 403 when `--lora-admin` is false.
A refusal's status follows its rule: the trust policy's path and allow-list rules are 403, a name
taken or every slot in use 409, weights over the size cap 413, an adapter or path not there 404,
anything about the adapter itself (rank, shapes, no slots at all) 400.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import asdict
from typing import TypeVar

from fastapi import Request

from engine.api import AdapterRefused, EngineUnavailable
from generated import models
from handlers.api_error import ApiError
from handlers.availability import not_serving, require_ready
from handlers.context import AdapterAdmin, AdapterEntry, ServerContext, context

T = TypeVar("T")

_STATUS = {
    "lora_path": 403,
    "lora_not_allowed": 403,
    "lora_digest": 403,
    "lora_not_found": 404,
    "lora_exists": 409,
    "lora_unloading": 409,
    "lora_slots_full": 409,
    "lora_too_large": 413,
}
_HINTS = {"lora_disabled": " Start the server with --max-loras N to serve adapters."}


async def list_lora_adapters(request: Request) -> models.LoraAdapterList:
    server = _administered(request)
    adapters = server.model.adapters  # none on an encoder: nothing to list
    entries = [lora_adapter(entry, server.model.model_id) for entry in adapters.listing()] if adapters else []
    return models.LoraAdapterList(object="list", data=entries, slots=adapters.slots if adapters else 0)


async def load_lora_adapter(request: Request, body: models.LoraAdapterLoadRequest) -> models.LoraAdapter:
    server, adapters = _admin(request)
    entry = await _refusals(server, adapters.load(body.name, body.path))
    return lora_adapter(entry, server.model.model_id)


async def unload_lora_adapter(request: Request, name: str) -> models.LoraAdapterDeleted:
    server, adapters = _admin(request)
    await _refusals(server, adapters.unload(name))
    return models.LoraAdapterDeleted(object="lora_adapter.deleted", name=name, deleted=True)


def lora_adapter(entry: AdapterEntry, parent: str) -> models.LoraAdapter:
    return models.LoraAdapter.model_validate({"object": "lora_adapter", "parent": parent, **asdict(entry)})


def _administered(request: Request) -> ServerContext:
    server = context(request)
    if not server.lora_admin:
        raise ApiError(
            403,
            "LoRA adapter administration is turned off on this server (--lora-admin false).",
            code="lora_admin_disabled",
        )
    require_ready(request)
    return server


def _admin(request: Request) -> tuple[ServerContext, AdapterAdmin]:
    server = _administered(request)
    adapters = server.model.adapters
    if adapters is None:
        raise ApiError(
            400, f"'{server.model.model_id}' is an encoder: it takes no LoRA adapters.", code="lora_disabled"
        )
    return server, adapters


async def _refusals(server: ServerContext, work: Awaitable[T]) -> T:
    """`work`'s result, or its refusal in the API's shape."""
    try:
        return await work
    except AdapterRefused as refused:
        message = refused.message + _HINTS.get(refused.code, "")
        raise ApiError(_STATUS.get(refused.code, 400), message, code=refused.code) from None
    except (EngineUnavailable, RuntimeError):  # draining, or the engine died under the job
        if server.model.state == "serving":
            raise
        raise not_serving(server.model, 503) from None
