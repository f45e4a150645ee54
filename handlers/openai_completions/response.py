"""Engine events → a Completions answer or its stream; choice `i * n + row` is prompt i's row.

The prompts' requests run at once in the engine; a stream sends their chunks prompt by prompt.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace

from engine.api import TokenLogprob
from generated import models
from handlers.api_error import ApiError, openai_error_body
from handlers.generation.engine_bridge import Generation
from handlers.generation.identity import AnswerIdentity
from handlers.generation.prompt_logprobs import PromptLogprobs, prompt_logprobs
from handlers.generation.row_stream import FinishReason, RowEvent, UsageCount, row_events
from handlers.generation.sse import data_line
from handlers.generation.text_output import Piece, RowText
from handlers.openai_completions.request import CompletionPlan
from handlers.openai_usage import usage_model
from text import Tokenizer


class CompletionRun:
    """The prompts' generations, consumed prompt by prompt into choice-indexed events."""

    def __init__(self, plan: CompletionPlan, generations: Sequence[Generation], tokenizer: Tokenizer) -> None:
        self.plan = plan
        self.tokenizer = tokenizer
        self.usage = UsageCount(prompt_tokens=sum(len(request.prompt_ids) for request in plan.requests))
        self._generations = generations

    async def events(self) -> AsyncGenerator[tuple[int, RowEvent], None]:
        """(choice index, event) pairs; the first event of each choice carries the echoed prompt."""
        for prompt_index, generation in enumerate(self._generations):
            rows = [RowText(self.tokenizer, self.plan.stops) for _ in range(self.plan.n)]
            echoed: set[int] = set()
            async for event in row_events(generation, rows, self.usage):
                if event.row not in echoed and self.plan.echo:
                    echoed.add(event.row)
                    event.piece.content = self.plan.prompt_texts[prompt_index] + event.piece.content
                yield prompt_index * self.plan.n + event.row, event
            self.usage.add_rows(rows)

    def answer_logprobs(self, index: int, entries: Sequence[TokenLogprob], first: bool) -> models.CompletionLogprobs:
        """Choice `index`'s logprobs of `entries`; with `echo`, its `first` entries come after the
        prompt's, whose first token has none (null, as in OpenAI's legacy API)."""
        if not (first and self.plan.echo):
            return self.logprobs(entries, 0)
        prompt_index = index // self.plan.n
        ids = self.plan.requests[prompt_index].prompt_ids
        head = self.tokenizer.decode([ids[0]])
        top = self.plan.logprobs_top
        scored = [replace(entry, top=entry.top[:top]) for entry in self._generations[prompt_index].prompt_logprobs]
        prompt = self.logprobs(scored, len(head))
        answer = self.logprobs(entries, len(self.plan.prompt_texts[prompt_index]))
        return models.CompletionLogprobs(
            tokens=[head, *prompt.tokens, *answer.tokens],
            token_logprobs=[None, *prompt.token_logprobs, *answer.token_logprobs],
            top_logprobs=[None, *prompt.top_logprobs, *answer.top_logprobs],
            text_offset=[0, *prompt.text_offset, *answer.text_offset],
        )

    def prompt_logprobs(self, index: int) -> PromptLogprobs | None:
        """vLLM's `prompt_logprobs` of choice `index`'s prompt, when the request asked for them."""
        top = self.plan.prompt_logprobs
        if top is None:
            return None
        return prompt_logprobs(self._generations[index // self.plan.n].prompt_logprobs, top, self.tokenizer)

    def logprobs(self, entries: Sequence[TokenLogprob], offset: int) -> models.CompletionLogprobs:
        """Logprobs of `entries`, whose text starts at character `offset` of the choice's text."""
        tokens = [self.tokenizer.decode([entry.token_id]) for entry in entries]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        return models.CompletionLogprobs(
            tokens=tokens,
            token_logprobs=[entry.logprob for entry in entries],
            top_logprobs=[
                {self.tokenizer.decode([token_id]): logprob for token_id, logprob in entry.top} for entry in entries
            ],
            text_offset=offsets,
        )


async def completion(run: CompletionRun, model_id: str) -> models.Completion:
    count = len(run.plan.requests) * run.plan.n
    answers = [Piece() for _ in range(count)]
    finishes: list[FinishReason] = ["stop"] * count
    async for index, event in run.events():
        answers[index].extend(event.piece)
        if event.finish:
            finishes[index] = event.finish
    identity = AnswerIdentity.new("cmpl-", model_id)
    return models.Completion(
        id=identity.id,
        object="text_completion",
        created=identity.created,
        model=identity.model,
        choices=[_choice(run, index, answer, finishes[index]) for index, answer in enumerate(answers)],
        usage=usage_model(run.usage),
    )


def _choice(run: CompletionRun, index: int, answer: Piece, finish: FinishReason) -> models.CompletionChoice:
    logprobs = run.answer_logprobs(index, answer.logprobs, True) if run.plan.logprobs else None
    choice = models.CompletionChoice(index=index, text=answer.content, logprobs=logprobs, finish_reason=finish)
    scored = run.prompt_logprobs(index)
    if scored is not None:
        choice.prompt_logprobs = scored
    return choice


async def completion_stream(run: CompletionRun, model_id: str) -> AsyncGenerator[str, None]:
    identity = AnswerIdentity.new("cmpl-", model_id)
    text_lengths: dict[int, int] = {}

    def chunk(
        choices: list[models.CompletionChunkChoice], usage: models.CompletionUsage | models.UsageSoFar | None = None
    ) -> str:
        body = models.CompletionChunk(
            id=identity.id, object="text_completion", created=identity.created, model=identity.model, choices=choices
        )
        if run.plan.stream_usage.final:
            body.usage = usage
        return data_line(body.model_dump(mode="json", exclude_unset=True))

    try:
        async for index, event in run.events():
            prompt_tokens = len(run.plan.requests[index // run.plan.n].prompt_ids)
            so_far = run.plan.stream_usage.so_far(prompt_tokens, event.tokens)
            first = index not in text_lengths
            offset = text_lengths.get(index, 0)
            text_lengths[index] = offset + len(event.piece.content)
            logprobs = None
            if run.plan.logprobs and (event.piece.logprobs or (first and run.plan.echo)):
                logprobs = run.answer_logprobs(index, event.piece.logprobs, first)
                if not first:
                    logprobs.text_offset = [offset + at for at in logprobs.text_offset]
            if event.piece.content or logprobs:
                choice = models.CompletionChunkChoice(
                    index=index, text=event.piece.content, logprobs=logprobs, finish_reason=None
                )
                yield chunk([choice], so_far)
            if event.finish:
                ending = models.CompletionChunkChoice(index=index, text="", logprobs=None, finish_reason=event.finish)
                yield chunk([ending], so_far)
    except ApiError as error:
        yield data_line(openai_error_body(error))
        return
    if run.plan.stream_usage.final:
        yield chunk([], usage_model(run.usage))
    yield data_line("[DONE]")
