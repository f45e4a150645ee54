"""The `usage` object both OpenAI completion APIs answer with."""

from __future__ import annotations

from generated import models
from handlers.generation.row_stream import UsageCount


def usage_model(usage: UsageCount) -> models.CompletionUsage:
    return models.CompletionUsage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
        prompt_tokens_details=models.PromptTokensDetails(cached_tokens=usage.cached_tokens),
        completion_tokens_details=models.CompletionTokensDetails(reasoning_tokens=usage.reasoning_tokens),
    )
