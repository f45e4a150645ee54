"""The request fields a Response object repeats back, with OpenAI's defaults where the request was
silent; its temperature and top_p are those it samples with (`sampling`: the request's own, else
the server's defaults)."""

from __future__ import annotations

from typing import Any

from engine.api import SamplingParams
from generated import models


def echoed_fields(body: models.CreateResponseRequest, model_id: str, sampling: SamplingParams) -> dict[str, Any]:
    text_format = body.text.format if body.text and body.text.format else None
    fields: dict[str, Any] = {
        "model": model_id,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": body.max_tool_calls,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort, "summary": body.reasoning.summary} if body.reasoning else None,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_logprobs": body.top_logprobs,
        "text": {
            "format": text_format.model_dump(
                include={"type", "name", "description", "schema_", "strict"}, exclude_none=True, by_alias=True
            )
            if text_format
            else {"type": "text"},
            "verbosity": body.text.verbosity if body.text else None,
        },
        "tool_choice": _tool_choice(body.tool_choice),
        "tools": [tool.model_dump(exclude_none=True) for tool in body.tools or []],
        "truncation": body.truncation or "disabled",
        "metadata": body.metadata or {},
        "background": False,
        "service_tier": body.service_tier or "default",
        "prompt_cache_key": body.prompt_cache_key,
        "safety_identifier": body.safety_identifier,
    }
    if body.user is not None:  # OpenAI's Response has no null `user`: absent when the request sent none
        fields["user"] = body.user
    return fields


def _tool_choice(choice: str | models.ResponseToolChoiceObjectParam | None) -> str | dict[str, Any]:
    if choice is None:
        return "auto"
    return choice if isinstance(choice, str) else choice.model_dump(exclude_none=True)
