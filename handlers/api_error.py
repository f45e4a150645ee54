"""The one exception a handler raises to answer an error in its API's own shape.

Handlers speak in statuses and messages; `pooled.web.error_bodies` decides the body shape
(OpenAI's or Anthropic's) from the request path. The body builders live here because a
stream that fails after its 200 carries the same body as its last event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    426: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass
class ApiError(Exception):
    """An error answer: HTTP status, a message for humans, and optional machine-readable parts."""

    status: int
    message: str
    code: str | None = None
    param: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


def openai_error_body(error: ApiError) -> dict[str, object]:
    """`{"error": {message, type, param, code}}`: an OpenAI error answer, or the last line of a failed stream."""
    return {
        "error": {
            "message": error.message,
            "type": OPENAI_TYPES.get(error.status, "server_error"),
            "param": error.param,
            "code": error.code,
        }
    }


def anthropic_error_body(error: ApiError) -> dict[str, object]:
    """`{"type": "error", "error": {type, message}}`: an Anthropic error answer or `error` stream event."""
    return {
        "type": "error",
        "error": {"type": ANTHROPIC_TYPES.get(error.status, "api_error"), "message": error.message},
    }
