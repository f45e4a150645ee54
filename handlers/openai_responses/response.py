"""Engine events → a Response object, or the Responses event stream; the finished response is stored.

A stream sends `response.created` and `response.in_progress` (the response with no output yet),
then each output item's events (`output_item.added`, its parts and deltas, `output_item.done`),
and ends with `response.completed`, or `response.incomplete` when the output budget ran out, whose
response carries the whole output and the usage. An error after the 200 is an `error` event
followed by `response.failed`. Every event has an `event:` line and a `sequence_number`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.api import TokenLogprob
from generated import models
from handlers.api_error import ApiError
from handlers.context import GenerationLimits, ModelService
from handlers.generation.engine_bridge import RESPONSES_API, Generation, start_generation
from handlers.generation.row_stream import FinishReason, UsageCount, row_events
from handlers.generation.sse import named_event
from handlers.generation.text_output import chat_row_text
from handlers.openai_chat.response import chat_logprobs
from handlers.openai_responses.output import Event, OutputBuilder
from handlers.openai_responses.request import ResponsePlan
from handlers.response_store import ResponseStore
from text import Tokenizer

Status = Literal["in_progress", "completed", "incomplete", "failed"]


@dataclass
class ResponseRun:
    """One response as it is generated: what it echoes of the request, its output so far, its usage."""

    plan: ResponsePlan
    echo: dict[str, Any]  # the request fields the Response object repeats
    store: ResponseStore | None  # None: not stored (`store: false`)
    tokenizer: Tokenizer
    id: str = field(default_factory=lambda: "resp_" + secrets.token_hex(16))
    created_at: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.finish: FinishReason = "stop"
        self.usage = UsageCount(prompt_tokens=len(self.plan.generation.prompt_ids))
        rendered = self.plan.rendered
        self.row = chat_row_text(self.tokenizer, rendered.prompt, (), rendered.tool_plan.use.parses_calls)
        shaper = self._logprobs if self.plan.logprobs else None
        self.output = OutputBuilder(rendered.tools, rendered.tool_plan.forced_custom, shaper)

    async def events(self, generation: Generation) -> AsyncGenerator[Event, None]:
        """The output events; afterwards `finish` says how the row ended."""
        async for event in row_events(generation, [self.row], self.usage):
            for output_event in self.output.add(event.piece):
                yield output_event
            if event.finish:
                self.finish = event.finish
        for output_event in self.output.finish("incomplete" if self.finish == "length" else "completed"):
            yield output_event
        self.usage.add_rows([self.row])

    def snapshot(self, status: Status, error: ApiError | None = None) -> dict[str, Any]:
        finished = status in ("completed", "incomplete")
        response = {
            **self.echo,
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": int(time.time()) if status == "completed" else None,
            "status": status,
            "error": {"code": error.code or "server_error", "message": error.message} if error else None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "output": list(self.output.items) if status != "in_progress" else [],
        }
        if finished:
            response["usage"] = _usage(self.usage)
        return response

    def conclude(self, error: ApiError | None = None) -> dict[str, Any]:
        """The finished (or failed) response, stored unless the request said `store: false`."""
        status: Status = "failed" if error else "incomplete" if self.finish == "length" else "completed"
        response = self.snapshot(status, error)
        if self.store is not None:
            self.store.put(self.id, response, self.plan.rendered.items)
        return response

    def _logprobs(self, logprobs: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
        # Chat's token logprobs have exactly the fields of the Responses ones.
        return chat_logprobs(logprobs, self.tokenizer).model_dump(mode="json")["content"]


def _usage(usage: UsageCount) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


async def response_answer(run: ResponseRun, model: ModelService, limits: GenerationLimits) -> models.ResponseObject:
    async with start_generation(model, run.plan.generation, limits, RESPONSES_API) as generation:
        async for _ in run.events(generation):
            pass
    return models.ResponseObject.model_validate(run.conclude())


async def response_stream(run: ResponseRun, generation: Generation) -> AsyncGenerator[str, None]:
    async for event in response_events(run, generation):
        yield named_event(event["type"], event)


async def response_events(run: ResponseRun, generation: Generation) -> AsyncGenerator[Event, None]:
    """The stream's events, each with its `sequence_number`: as SSE (`response_stream`) or over a
    WebSocket (handlers/openai_responses/websocket.py)."""
    sequence = 0

    def numbered(event: Event) -> Event:
        nonlocal sequence
        event["sequence_number"] = sequence
        sequence += 1
        return event

    for kind in ("response.created", "response.in_progress"):
        yield numbered({"type": kind, "response": run.snapshot("in_progress")})
    try:
        async for event in run.events(generation):
            yield numbered(event)
    except ApiError as error:
        yield numbered({"type": "error", "code": error.code, "message": error.message, "param": error.param})
        yield numbered({"type": "response.failed", "response": run.conclude(error)})
        return
    final = run.conclude()
    yield numbered({"type": f"response.{final['status']}", "response": final})
