"""Engine events → an Anthropic Message, or its stream of named events.

A stream sends `message_start` (usage with the prompt's tokens), a `ping`, the block events of
`ContentBlocks`, `message_delta` (stop reason, stop sequence and the final usage: output tokens
and the prefix-cache split of the input, known only once the engine finished) and
`message_stop`. Every event is an `event:` line plus a `data:` line; a `ping` event is the
keep-alive while it waits. An error after the 200 is an `error` event, the stream's last.

Usage: `input_tokens` are the prompt tokens prefilled, `cache_read_input_tokens` those the prefix
cache served, so the two add up to the prompt (`count_tokens`); pooled caches without
`cache_control`, so `cache_creation_input_tokens` is 0.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Literal

from generated import models
from handlers.anthropic_messages.blocks import ContentBlocks
from handlers.anthropic_messages.request import MessagesPlan
from handlers.api_error import ApiError, anthropic_error_body
from handlers.context import GenerationLimits, ModelService
from handlers.generation.adapter_choice import answering_model
from handlers.generation.engine_bridge import MESSAGES_API, Generation, start_generation
from handlers.generation.identity import AnswerIdentity
from handlers.generation.row_stream import FinishReason, UsageCount, row_events
from handlers.generation.sse import named_event
from handlers.generation.text_output import RowText, chat_row_text
from text import Tokenizer

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]

PING = named_event("ping", {"type": "ping"})


def _row(plan: MessagesPlan, tokenizer: Tokenizer) -> RowText:
    return chat_row_text(tokenizer, plan.prompt, plan.stops, plan.tools.parses_calls)


def _stop(finish: FinishReason | None, row: RowText) -> tuple[StopReason, str | None]:
    if finish == "length":
        return "max_tokens", None
    if row.stop_string is not None:
        return "stop_sequence", row.stop_string
    return ("tool_use" if row.tool_calls else "end_turn"), None


def _usage(usage: UsageCount) -> models.AnthropicUsage:
    return models.AnthropicUsage(
        input_tokens=usage.prompt_tokens - usage.cached_tokens,
        output_tokens=usage.completion_tokens,
        cache_creation_input_tokens=0,
        cache_read_input_tokens=usage.cached_tokens,
    )


def _message(
    model_id: str, blocks: ContentBlocks, stop: tuple[StopReason | None, str | None], usage: UsageCount
) -> models.AnthropicMessage:
    return models.AnthropicMessage(
        id=AnswerIdentity.new("msg_", model_id).id,
        type="message",
        role="assistant",
        content=list(blocks.blocks),
        model=model_id,
        stop_reason=stop[0],
        stop_sequence=stop[1],
        usage=_usage(usage),
    )


async def message(
    plan: MessagesPlan, model: ModelService, tokenizer: Tokenizer, limits: GenerationLimits
) -> models.AnthropicMessage:
    row = _row(plan, tokenizer)
    blocks = ContentBlocks()
    usage = UsageCount(prompt_tokens=len(plan.generation.prompt_ids))
    finish: FinishReason | None = None
    async with start_generation(model, plan.generation, limits, MESSAGES_API) as generation:
        async for event in row_events(generation, [row], usage):
            blocks.add(event.piece)
            finish = event.finish or finish
    blocks.close()
    usage.add_rows([row])
    return _message(answering_model(model, plan.generation.adapter), blocks, _stop(finish, row), usage)


class MessageStream:
    """The events of one streamed answer, as `event:` + `data:` pairs."""

    def __init__(self, plan: MessagesPlan, generation: Generation, model_id: str, tokenizer: Tokenizer) -> None:
        self._plan = plan
        self._generation = generation
        self._model_id = model_id
        self._tokenizer = tokenizer

    async def lines(self) -> AsyncGenerator[str, None]:
        row = _row(self._plan, self._tokenizer)
        blocks = ContentBlocks()
        usage = UsageCount(prompt_tokens=len(self._plan.generation.prompt_ids))
        # The prefix cache's share of the prompt is known once the engine finished: message_delta has it.
        start = _message(self._model_id, blocks, (None, None), usage)
        yield _event(models.AnthropicMessageStartEvent(type="message_start", message=start))
        yield PING
        finish: FinishReason | None = None
        try:
            async for event in row_events(self._generation, [row], usage):
                for block_event in blocks.add(event.piece):
                    yield _event(block_event)
                finish = event.finish or finish
        except ApiError as error:
            yield named_event("error", anthropic_error_body(error))
            return
        for block_event in blocks.close():
            yield _event(block_event)
        usage.add_rows([row])
        stop_reason, stop_sequence = _stop(finish, row)
        final = _usage(usage)
        yield _event(
            models.AnthropicMessageDeltaEvent(
                type="message_delta",
                delta=models.AnthropicMessageDelta(stop_reason=stop_reason, stop_sequence=stop_sequence),
                usage=models.AnthropicMessageDeltaUsage(**final.model_dump()),
            )
        )
        yield _event(models.AnthropicMessageStopEvent(type="message_stop"))


def _event(
    event: models.AnthropicMessageStartEvent
    | models.AnthropicContentBlockStartEvent
    | models.AnthropicContentBlockDeltaEvent
    | models.AnthropicContentBlockStopEvent
    | models.AnthropicMessageDeltaEvent
    | models.AnthropicMessageStopEvent,
) -> str:
    return named_event(event.type, event.model_dump(mode="json"))
