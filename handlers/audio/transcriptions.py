"""`POST /v1/audio/transcriptions` and `POST /v1/audio/translations`, served by the speech model.

The form is read in memory (handlers/audio/form.py), its audio decoded on a worker thread, and a
`TranscriptionRequest` submitted to the engine's one queue. The engine calls the sink on its own
thread; the sink only posts each event into the handler's queue on the loop. Each event is
progress: one that does not come within the request timeout is a 504, and a client that leaves
(or a stream that ends early) cancels the engine request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import Response

from engine.api import (
    EngineUnavailable,
    Failed,
    QueueFull,
    RequestRefused,
    SpeechSegment,
    Transcribed,
    TranscriptionEvent,
    TranscriptionRequest,
)
from generated import models
from handlers.api_error import ApiError, openai_error_body
from handlers.audio import formats
from handlers.audio.form import UploadForm, read_form
from handlers.audio.request import SpeechPlan, audio_samples, form_model, transcription_plan, translation_plan
from handlers.availability import awake, not_serving, require_ready
from handlers.context import GenerationLimits, ModelService, SpeechService, context
from handlers.generation.disconnect import unless_disconnected
from handlers.generation.engine_bridge import ENGINE_GRACE_S, FAILED_STATUS, timeout_error
from handlers.generation.sse import EventStream, data_line

# The form's names for a transcription's parts the engine's refusals name otherwise.
_FIELDS = {"audio": "file", "prompt_ids": "prompt", "temperatures": "temperature"}


async def create_transcription(request: Request) -> Response | models.Transcription | models.TranscriptionVerbose:
    speech, limits, form = await _speech_form(request)
    body: models.TranscriptionForm = form_model(form, models.TranscriptionForm)
    plan = transcription_plan(body, await audio_samples(form, limits), speech)
    model = context(request).model
    if plan.stream:
        return await _stream(model, speech, plan, limits)
    answer = await unless_disconnected(request, _transcribe(model, speech, plan, limits))
    if plan.response_format == "json":
        text = models.Transcription(text=formats.whole_text(answer.texts), usage=answer.usage())
        if plan.logprobs:
            text.logprobs = formats.all_logprobs(answer.segments, speech.tokenizer)
        return text
    if plan.response_format == "verbose_json":
        verbose = models.TranscriptionVerbose(
            task="transcribe",
            language=answer.done.language,
            duration=answer.done.duration,
            text=formats.whole_text(answer.texts),
            segments=answer.api_segments(),
            usage=models.TranscriptionDurationUsage(type="duration", seconds=answer.done.duration),
        )
        if plan.words:
            verbose.words = formats.api_words(answer.segments, speech.tokenizer)
        return verbose
    return formats.plain_text(plan.response_format, answer.segments, answer.texts)


async def create_translation(request: Request) -> Response | models.Translation | models.TranslationVerbose:
    speech, limits, form = await _speech_form(request)
    body: models.TranslationForm = form_model(form, models.TranslationForm)
    plan = translation_plan(body, await audio_samples(form, limits), speech)
    answer = await unless_disconnected(request, _transcribe(context(request).model, speech, plan, limits))
    if plan.response_format == "json":
        return models.Translation(text=formats.whole_text(answer.texts))
    if plan.response_format == "verbose_json":
        return models.TranslationVerbose(
            task="translate",
            language="en",
            duration=answer.done.duration,
            text=formats.whole_text(answer.texts),
            segments=answer.api_segments(),
        )
    return formats.plain_text(plan.response_format, answer.segments, answer.texts)


async def _speech_form(request: Request) -> tuple[SpeechService, GenerationLimits, UploadForm]:
    """The speech model (or the error saying why there is none), the limits in force, and the form."""
    server = context(request)
    await awake(server.model)
    require_ready(request)
    speech = speech_model(server.model)
    limits = server.limits
    return speech, limits, await read_form(request, limits.max_audio_bytes)


def speech_model(model: ModelService) -> SpeechService:
    """The speech model; a 503 naming why when it did not load, a 400 naming the flag without one."""
    if model.speech is not None:
        return model.speech
    for part in model.failed_parts:
        if part.kind == "speech":
            raise ApiError(
                503,
                f"The speech model (--speech-model {part.path}) did not load: {part.reason}. The audio routes "
                f"are down until the server starts with one that loads; '{model.model_id}' still serves.",
                code="model_failed",
            )
    raise ApiError(
        400,
        f"This server has no speech model: start it with --speech-model PATH (a Whisper model folder; it "
        f"serves '{model.model_id}', a {model.kind} model).",
        code="model_not_supported",
        param="model",
    )


@dataclass
class _Answer:
    """A finished transcription: its segments with their texts, and the engine's closing event."""

    speech: SpeechService
    prompt_tokens: int
    segments: list[SpeechSegment] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    done: Transcribed = Transcribed("", 0.0, 0.0, 0)

    def add(self, segment: SpeechSegment) -> str:
        text = formats.segment_text(segment, self.speech.tokenizer)
        self.segments.append(segment)
        self.texts.append(text)
        return text

    def usage(self) -> models.TranscriptionTokenUsage:
        return formats.token_usage(self.prompt_tokens, self.done)

    def api_segments(self) -> list[models.TranscriptionSegment]:
        return [formats.api_segment(segment, text) for segment, text in zip(self.segments, self.texts, strict=True)]


@asynccontextmanager
async def _submitted(
    model: ModelService, request: TranscriptionRequest, limits: GenerationLimits
) -> AsyncIterator[AsyncGenerator[SpeechSegment | Transcribed, None]]:
    """The request's events as they come; on exit, an unfinished request is cancelled."""
    engine = model.engine
    if engine is None:
        raise not_serving(model, 503)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[TranscriptionEvent] = asyncio.Queue()

    def sink(event: TranscriptionEvent) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, event)

    try:
        request_id = engine.submit(request, sink)
    except QueueFull as full:
        raise ApiError(
            429,
            f"The server is busy: its wait queue is full. Retry after {full.retry_after_s} s.",
            code="queue_full",
            headers={"Retry-After": str(full.retry_after_s)},
        ) from None
    except RequestRefused as refused:
        param = _FIELDS.get(refused.field or "", refused.field)
        raise ApiError(400, refused.message, code=refused.code, param=param) from None
    except EngineUnavailable:
        raise not_serving(model, 503) from None
    finished = False

    async def events() -> AsyncGenerator[SpeechSegment | Transcribed, None]:
        nonlocal finished
        while True:
            try:
                async with asyncio.timeout(limits.request_timeout_s + ENGINE_GRACE_S):
                    event = await queue.get()
            except TimeoutError:
                raise timeout_error() from None
            if isinstance(event, Failed):
                finished = True
                raise ApiError(FAILED_STATUS[event.kind], event.message, code=event.kind)
            yield event
            if isinstance(event, Transcribed):
                finished = True
                return

    try:
        yield events()
    finally:
        if not finished:
            engine.cancel(request_id)


async def _transcribe(
    model: ModelService, speech: SpeechService, plan: SpeechPlan, limits: GenerationLimits
) -> _Answer:
    answer = _Answer(speech, len(plan.request.prompt_ids))
    async with _submitted(model, plan.request, limits) as events:
        async for event in events:
            if isinstance(event, SpeechSegment):
                answer.add(event)
            else:
                answer.done = event
    return answer


async def _stream(model: ModelService, speech: SpeechService, plan: SpeechPlan, limits: GenerationLimits) -> Response:
    """`transcript.text.delta` a segment as it is decoded, then `transcript.text.done` with usage.
    A refusal is a plain HTTP error (it comes before the 200); a failure after it, an error event."""
    answer = _Answer(speech, len(plan.request.prompt_ids))
    opened = _submitted(model, plan.request, limits)
    events = await opened.__aenter__()

    async def lines() -> AsyncGenerator[str, None]:
        try:
            async for event in events:
                if isinstance(event, Transcribed):
                    answer.done = event
                    break
                text = answer.add(event)
                delta = text.lstrip() if len(answer.texts) == 1 else text
                if not delta and not plan.logprobs:
                    continue
                chunk = models.TranscriptTextDeltaEvent(type="transcript.text.delta", delta=delta)
                if plan.logprobs:
                    chunk.logprobs = formats.logprobs(event, speech.tokenizer)
                yield data_line(chunk.model_dump(mode="json", exclude_unset=True))
        except ApiError as error:
            yield data_line(openai_error_body(error))
            return
        done = models.TranscriptTextDoneEvent(
            type="transcript.text.done", text=formats.whole_text(answer.texts), usage=answer.usage()
        )
        if plan.logprobs:
            done.logprobs = formats.all_logprobs(answer.segments, speech.tokenizer)
        yield data_line(done.model_dump(mode="json", exclude_unset=True))

    async def close() -> None:
        await opened.__aexit__(None, None, None)

    return EventStream(lines(), limits.keepalive_interval_s, close)
