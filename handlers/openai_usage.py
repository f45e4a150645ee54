"""The `usage` object both OpenAI completion APIs answer with, and what their streams carry of it."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class StreamUsage:
    """What a stream's `stream_options` ask of usage: the request's in a last chunk (`include_usage`),
    and with it, as vLLM sends them, the counts so far on every other chunk (`continuous_usage_stats`)."""

    final: bool = False
    continuous: bool = False

    @classmethod
    def asked(cls, options: models.StreamOptions | None) -> StreamUsage:
        if options is None or not options.include_usage:
            return cls()
        return cls(final=True, continuous=bool(options.continuous_usage_stats))

    def so_far(self, prompt_tokens: int, completion_tokens: int) -> models.UsageSoFar | None:
        """A choice's chunk's usage: its prompt's tokens and its own so far, or None when not asked."""
        if not self.continuous:
            return None
        return models.UsageSoFar(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
