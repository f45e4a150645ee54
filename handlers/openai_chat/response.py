"""Engine events → a Chat Completions answer, or its stream of `chat.completion.chunk`s.

A stream sends, per choice, a first chunk with the role, then one chunk per piece of text (with
that piece's logprobs), then a chunk with the finish reason; with `include_usage` a last chunk
with no choices carries the usage (and with `continuous_usage_stats` every other chunk its
choice's usage so far); then `data: [DONE]`. An error after the 200 is the stream's last line, an
OpenAI error object, with no `[DONE]`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Literal

from engine.api import TokenLogprob
from generated import models
from handlers.api_error import ApiError, openai_error_body
from handlers.context import GenerationLimits, ModelService
from handlers.generation.adapter_choice import answering_model
from handlers.generation.engine_bridge import CHAT_API, Generation, start_generation
from handlers.generation.identity import AnswerIdentity
from handlers.generation.prompt_logprobs import prompt_logprobs
from handlers.generation.row_stream import FinishReason, UsageCount, row_events
from handlers.generation.sse import data_line
from handlers.generation.text_output import Piece, RowText, chat_row_text
from handlers.generation.tool_calls import CallFragment
from handlers.openai_chat.request import ChatPlan
from handlers.openai_usage import usage_model
from text import Tokenizer

ChatFinish = Literal["stop", "length", "tool_calls"]


def _rows(plan: ChatPlan, tokenizer: Tokenizer) -> list[RowText]:
    parses_calls = plan.tools.parses_calls
    return [chat_row_text(tokenizer, plan.prompt, plan.stops, parses_calls) for _ in range(plan.generation.n)]


def _finish(reason: FinishReason, row: RowText) -> ChatFinish:
    return "tool_calls" if reason == "stop" and row.tool_calls else reason


def chat_logprobs(logprobs: Sequence[TokenLogprob], tokenizer: Tokenizer) -> models.ChatChoiceLogprobs:
    def top(token_id: int, logprob: float) -> models.ChatTopLogprob:
        text = tokenizer.decode([token_id])
        return models.ChatTopLogprob(token=text, logprob=logprob, bytes=list(text.encode()))

    return models.ChatChoiceLogprobs(
        content=[
            models.ChatTokenLogprob(
                **top(entry.token_id, entry.logprob).model_dump(),
                top_logprobs=[top(token_id, logprob) for token_id, logprob in entry.top],
            )
            for entry in logprobs
        ],
        refusal=None,
    )


async def chat_completion(
    plan: ChatPlan, model: ModelService, tokenizer: Tokenizer, limits: GenerationLimits
) -> models.ChatCompletion:
    rows = _rows(plan, tokenizer)
    answers = [Piece() for _ in rows]
    finishes: list[ChatFinish] = ["stop"] * len(rows)
    usage = UsageCount(prompt_tokens=len(plan.generation.prompt_ids))
    async with start_generation(model, plan.generation, limits, CHAT_API) as generation:
        async for event in row_events(generation, rows, usage):
            answers[event.row].extend(event.piece)
            if event.finish:
                finishes[event.row] = _finish(event.finish, rows[event.row])
    usage.add_rows(rows)
    identity = AnswerIdentity.new("chatcmpl-", answering_model(model, plan.generation.adapter))
    completion = models.ChatCompletion(
        id=identity.id,
        object="chat.completion",
        created=identity.created,
        model=identity.model,
        choices=[
            models.ChatCompletionChoice(
                index=index,
                message=_message(answer),
                logprobs=chat_logprobs(answer.logprobs, tokenizer) if plan.logprobs else None,
                finish_reason=finishes[index],
            )
            for index, answer in enumerate(answers)
        ],
        usage=usage_model(usage),
    )
    top = plan.generation.prompt_logprobs
    if top is not None:
        completion.prompt_logprobs = prompt_logprobs(generation.prompt_logprobs, top, tokenizer)
    return completion


def _call_delta(fragment: CallFragment) -> models.ChatCompletionChunkToolCall:
    """A call's fragment as a chunk's tool call: its id, type and name on the first, then arguments text."""
    if not fragment.opens:
        return models.ChatCompletionChunkToolCall(
            index=fragment.index, function=models.ChatCompletionChunkFunctionCall(arguments=fragment.arguments)
        )
    return models.ChatCompletionChunkToolCall(
        index=fragment.index,
        id=fragment.id,
        type="function",
        function=models.ChatCompletionChunkFunctionCall(name=fragment.name, arguments=fragment.arguments),
    )


def _message(answer: Piece) -> models.ChatCompletionMessage:
    message = models.ChatCompletionMessage(
        role="assistant",
        content=answer.content if answer.content or not answer.tool_calls else None,
        refusal=None,
    )
    if answer.reasoning:
        message.reasoning_content = answer.reasoning
    if answer.tool_calls:
        message.tool_calls = [
            models.ChatCompletionFunctionToolCall(
                id=call.id,
                type="function",
                function=models.ChatCompletionFunctionCall(name=call.name, arguments=call.arguments),
            )
            for call in answer.tool_calls
        ]
    return message


class ChatStream:
    """The chunks of one streamed answer, as `data:` lines."""

    def __init__(self, plan: ChatPlan, generation: Generation, model_id: str, tokenizer: Tokenizer) -> None:
        self._plan = plan
        self._generation = generation
        self._tokenizer = tokenizer
        self._identity = AnswerIdentity.new("chatcmpl-", model_id)

    async def lines(self) -> AsyncGenerator[str, None]:
        rows = _rows(self._plan, self._tokenizer)
        usage = UsageCount(prompt_tokens=len(self._plan.generation.prompt_ids))
        so_far = self._plan.stream_usage.so_far
        opening = models.ChatCompletionChunkDelta(role="assistant", content="")
        for index in range(len(rows)):
            yield self._chunk([self._choice(index, opening)], so_far(usage.prompt_tokens, 0))
        try:
            async for event in row_events(self._generation, rows, usage):
                choice = self._piece_choice(event.row, event.piece) if event.piece else None
                if choice is not None and (choice.delta.model_fields_set or choice.logprobs):
                    yield self._chunk([choice], so_far(usage.prompt_tokens, event.tokens))
                if event.finish:
                    finish = _finish(event.finish, rows[event.row])
                    ending = self._choice(event.row, models.ChatCompletionChunkDelta(), finish)
                    yield self._chunk([ending], so_far(usage.prompt_tokens, event.tokens))
        except ApiError as error:
            yield data_line(openai_error_body(error))
            return
        if self._plan.stream_usage.final:
            usage.add_rows(rows)
            yield self._chunk([], usage_model(usage))
        yield data_line("[DONE]")

    def _piece_choice(self, row: int, piece: Piece) -> models.ChatCompletionChunkChoice:
        delta = models.ChatCompletionChunkDelta()
        if piece.reasoning:
            delta.reasoning_content = piece.reasoning
        if piece.content:
            delta.content = piece.content
        calls = [_call_delta(fragment) for fragment in piece.call_fragments if fragment.opens or fragment.arguments]
        if calls:
            delta.tool_calls = calls
        choice = self._choice(row, delta)
        if self._plan.logprobs and piece.logprobs:
            choice.logprobs = chat_logprobs(piece.logprobs, self._tokenizer)
        return choice

    @staticmethod
    def _choice(
        row: int, delta: models.ChatCompletionChunkDelta, finish: ChatFinish | None = None
    ) -> models.ChatCompletionChunkChoice:
        return models.ChatCompletionChunkChoice(index=row, delta=delta, finish_reason=finish)

    def _chunk(
        self,
        choices: list[models.ChatCompletionChunkChoice],
        usage: models.CompletionUsage | models.UsageSoFar | None = None,
    ) -> str:
        chunk = models.ChatCompletionChunk(
            id=self._identity.id,
            object="chat.completion.chunk",
            created=self._identity.created,
            model=self._identity.model,
            choices=choices,
        )
        if self._plan.stream_usage.final:
            chunk.usage = usage  # OpenAI sends `usage: null` on every other chunk when usage is asked for
        return data_line(chunk.model_dump(mode="json", exclude_unset=True))
