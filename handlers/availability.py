"""Whether the model can take a request now, answered before any work is queued."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from engine.api import Vision
from handlers.api_error import ApiError
from handlers.context import LibraryRefused, ModelLibrary, ModelService, ServerContext, context
from handlers.models_folder import library_error
from text import Tokenizer

RETRY_AFTER_LOADING_S = 5


def require_ready(request: HTTPConnection, unavailable_status: int = 503) -> None:
    """Raise the API's 'not now' answer unless the model is serving.

    While the model loads or the server drains, OpenAI paths answer 503 and Anthropic paths pass
    529 (`overloaded_error`), the status Anthropic's clients retry on; a dead engine is 503 on
    every path (see `not_serving`).
    """
    model = context(request).model
    if model.state != "serving":
        raise not_serving(model, unavailable_status)


def not_serving(model: ModelService, unavailable_status: int) -> ApiError:
    """The answer while the model is not serving, by what it is doing instead."""
    retry = _retry_later(model)
    if retry is not None:
        message, code = retry
        return ApiError(unavailable_status, message, code=code, headers={"Retry-After": str(RETRY_AFTER_LOADING_S)})
    # Dead: no retry helps until someone restarts the server, so no Retry-After, and 503 on every
    # path, never the 529 that tells Anthropic's clients to retry.
    cause, reason = model.failure or ("fault", "unknown")
    return ApiError(503, f"The model is not running ({cause}: {reason}).", code="model_dead")


def _retry_later(model: ModelService) -> tuple[str, str] | None:
    """(message, code) for a state a retry after a while gets past; None when dead."""
    if model.state in ("loading", "serving"):  # "serving" but asked: the engine went away mid-request
        return "The model is still loading; retry after the Retry-After delay (GET /health shows progress).", (
            "model_not_ready"
        )
    if model.state == "unloaded":
        return (
            "The model was unloaded after an idle spell; a generation request loads it again. "
            "Retry after the Retry-After delay."
        ), "model_unloaded"
    if model.state == "switching":
        return f"The server is switching to {model.model_id}; retry after the Retry-After delay.", "model_switching"
    if model.state == "draining":
        # A supervisor restarts the server, which answers with Retry-After while it loads.
        return "The server is shutting down and takes no new requests; retry after the Retry-After delay.", "draining"
    return None


@dataclass(frozen=True)
class Serving:
    """A model ready to generate, with the parts every generating handler needs."""

    server: ServerContext
    model: ModelService
    tokenizer: Tokenizer
    ctx: int


def serving(request: HTTPConnection, unavailable_status: int = 503) -> Serving:
    """The serving model, or the API's 'not now' answer (see `require_ready`)."""
    require_ready(request, unavailable_status)
    server = context(request)
    model = server.model
    if model.kind != "chat":
        routes = {
            "embedding": "/v1/embeddings and /v1/rerank",
            "rerank": "/v1/rerank",
            "speech": "/v1/audio/transcriptions and /v1/audio/translations",
        }[model.kind]
        raise ApiError(
            400,
            f"'{model.model_id}' is {'an' if model.kind == 'embedding' else 'a'} {model.kind} model: it serves "
            f"{routes}, not text generation.",
            code="model_not_supported",
            param="model",
        )
    if model.tokenizer is None or model.ctx is None:
        raise not_serving(model, unavailable_status)
    return Serving(server, model, model.tokenizer, model.ctx)


async def serving_for(request: HTTPConnection, requested: str | None, unavailable_status: int = 503) -> Serving:
    """`serving`, once the server serves the model `requested` names: a request naming another model
    on disk (not an adapter of the one served) switches to it first (--switch-allow-implicit). A
    switch already under way to another model is the usual 503 with Retry-After."""
    server = context(request)
    await awake(server.model)
    library = server.library
    if requested and library is not None and library.implicit_switch and _switches_to(server, library, requested):
        try:
            await library.switch(requested)
        except LibraryRefused as refused:
            if refused.code != "busy":
                raise library_error(refused) from None
    return serving(request, unavailable_status)


async def awake(model: ModelService) -> None:
    """Waits for the model to load again when an idle unload freed it (the request that finds it
    unloaded starts the load; later ones wait for the same)."""
    waking = model.wake()
    if waking is not None:
        with contextlib.suppress(Exception):  # a reload that failed leaves the model dead: `serving` says so
            await asyncio.shield(asyncio.wrap_future(waking))


def _switches_to(server: ServerContext, library: ModelLibrary, name: str) -> bool:
    """Whether `name` is another model on disk, not an adapter of the one served."""
    adapters = server.model.adapters
    if adapters is not None and any(entry.name == name for entry in adapters.listing()):
        return False
    return library.names_model(name)


@contextlib.contextmanager
def counting_images(model: ModelService, unavailable_status: int) -> Iterator[Vision | None]:
    """How the model takes images, for a route that counts a prompt's tokens (it answers from the
    tokenizer while the engine compiles). An image's tokens need the engine's rules: an image met
    before the engine is up gets the loading answer (503, Retry-After), not "takes no images"."""
    try:
        yield model.engine.vision if model.engine is not None else None
    except ApiError as error:
        if error.code == "images_not_supported" and model.engine is None:
            raise not_serving(model, unavailable_status) from None
        raise


def loaded_tokenizer(model: ModelService, unavailable_status: int = 503) -> Tokenizer:
    """The tokenizer alone, for routes that count or convert tokens: it is read before the engine
    compiles, so they answer while the model is still warming up."""
    if model.tokenizer is None:
        raise not_serving(model, unavailable_status)
    return model.tokenizer
