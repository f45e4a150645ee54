"""The one exception a handler raises to answer an error in its API's own shape.

Handlers speak in statuses and messages; `pooled.errors` decides the body shape
(OpenAI's or Anthropic's) from the request path, so no handler formats errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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


def not_built(feature: str) -> ApiError:
    """The answer of a route whose engine part has not landed yet: an honest 501, never a fake answer."""
    return ApiError(501, f"{feature} is not built yet in this version of pooled.", code="not_implemented")
