"""What a handler may ask of the running server, without knowing how it is built.

`pooled` assembles a `ServerContext` and puts it on `app.state.context`; handlers
read it through `context(request)`. The model side is a Protocol so handlers
depend on its shape only: they never import JAX or the engine's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from fastapi import Request

from handlers.response_store import ResponseStore

ModelState = Literal["loading", "serving", "draining", "dead"]


class ModelService(Protocol):
    """The loaded (or loading) model as the HTTP side sees it."""

    @property
    def state(self) -> ModelState: ...

    @property
    def model_id(self) -> str: ...

    @property
    def ctx(self) -> int | None: ...

    @property
    def progress(self) -> dict[str, Any] | None: ...

    @property
    def failure(self) -> tuple[str, str] | None:
        """(cause, reason) once the model or its engine has died, else None."""
        ...

    @property
    def decode_lanes(self) -> int: ...


@dataclass
class Counters:
    """Request counts the HTTP side keeps itself (the engine keeps its own)."""

    served: int = 0
    in_flight: int = 0


@dataclass
class ServerContext:
    model: ModelService
    port: int
    created: int
    responses: ResponseStore
    counters: Counters = field(default_factory=Counters)


def context(request: Request) -> ServerContext:
    server_context: ServerContext = request.app.state.context
    return server_context
