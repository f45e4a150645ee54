"""Whether the model can take a request now, answered before any work is queued."""

from __future__ import annotations

from fastapi import Request

from handlers.context import context
from handlers.errors import ApiError

RETRY_AFTER_LOADING_S = 5


def require_ready(request: Request, unavailable_status: int = 503) -> None:
    """Raise the API's 'not now' answer unless the model is serving.

    OpenAI paths answer 503; Anthropic paths pass 529 (`overloaded_error`), the
    status Anthropic's clients retry on.
    """
    model = context(request).model
    if model.state == "serving":
        return
    if model.state == "loading":
        raise ApiError(
            unavailable_status,
            "The model is still loading; retry after the Retry-After delay (GET /health shows progress).",
            code="model_not_ready",
            headers={"Retry-After": str(RETRY_AFTER_LOADING_S)},
        )
    if model.state == "draining":
        raise ApiError(unavailable_status, "The server is shutting down and takes no new requests.", code="draining")
    cause, reason = model.failure or ("fault", "unknown")
    raise ApiError(unavailable_status, f"The model is not running ({cause}: {reason}).", code="model_dead")
