"""A transcription or translation form → the engine's `TranscriptionRequest` and how to answer it.

The form's text fields are read leniently: unknown fields are ignored, an array field may come
as `name[]` or `name`, a value a part (repeated for more), booleans as `true`/`false`, numbers
as their decimal text. Then they must pass the generated model of the form's schema, so a value
the spec does not allow is a 400 naming the field, as on the JSON routes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ValidationError

from engine.api import TranscriptionRequest
from generated import models
from handlers.api_error import ApiError
from handlers.audio.decoding import AudioRefused, decode_audio
from handlers.audio.form import FILE_FIELD, UploadForm
from handlers.context import GenerationLimits, SpeechService

Task = Literal["transcribe", "translate"]
ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]

_ARRAYS = {"timestamp_granularities", "include"}
_BOOLEANS = {"stream"}
_NUMBERS = {"temperature"}


@dataclass(frozen=True)
class SpeechPlan:
    """What the engine is asked, and how its answer is written."""

    request: TranscriptionRequest
    response_format: ResponseFormat
    stream: bool
    words: bool  # verbose_json's words
    logprobs: bool


def form_model(form: UploadForm, schema: type[BaseModel]) -> Any:
    """The form's fields as `schema` (the generated model of the route's form); a 400 naming the
    first field the spec does not allow."""
    values: dict[str, Any] = {}
    for name, sent in form.fields.items():
        if name not in schema.model_fields or name == FILE_FIELD:
            continue  # lenient in: a field the route does not know is ignored
        values[name] = _typed(name, sent)
    if form.file is not None:
        values[FILE_FIELD] = form.file
    try:
        return schema.model_validate(values)
    except ValidationError as error:
        first = error.errors()[0]
        param = ".".join(str(part) for part in first.get("loc", ()))
        if first.get("type") == "missing":
            raise ApiError(
                400, f"The form has no `{param}` field; send the audio file as `{param}`.", param=param
            ) from None
        raise ApiError(
            400, f"Invalid request at '{param}': {first.get('msg', 'invalid value')}.", param=param
        ) from None


def _typed(name: str, sent: list[str]) -> Any:
    if name in _ARRAYS:
        return sent
    value = sent[-1]
    if name in _BOOLEANS:
        return {"true": True, "false": False}.get(value.strip().lower(), value)
    if name in _NUMBERS:
        try:
            return float(value)
        except ValueError:
            return value  # the model refuses it, naming the field
    return value


def check_language(language: str | None, speech: SpeechService) -> str | None:
    if language is None:
        return None
    code = language.strip().lower()
    if code not in speech.languages:
        known = ", ".join(sorted(speech.languages))
        raise ApiError(
            400,
            f"language '{language}' is not one that '{speech.name}' knows; it knows: {known}.",
            code="unsupported_language",
            param="language",
        )
    return code


async def audio_samples(form: UploadForm, limits: GenerationLimits) -> np.ndarray:
    """The upload decoded, on a worker thread (a long mp3 takes a while; the loop serves on)."""
    if form.file is None:
        raise ApiError(400, "The form has no `file` field; send the audio file as `file`.", param=FILE_FIELD)
    try:
        return await asyncio.to_thread(decode_audio, form.file, limits.max_audio_seconds)
    except AudioRefused as refused:
        raise ApiError(400, refused.message, code=refused.code, param=FILE_FIELD) from None


def prompt_ids(prompt: str | None, speech: SpeechService) -> tuple[int, ...]:
    """Whisper's previous-text prompt: the text after a space, without special tokens."""
    if not prompt or not prompt.strip():
        return ()
    return tuple(speech.tokenizer.encode(" " + prompt.strip()))


def transcription_plan(body: models.TranscriptionForm, samples: np.ndarray, speech: SpeechService) -> SpeechPlan:
    response_format: ResponseFormat = body.response_format or "json"
    stream = bool(body.stream)
    logprobs = "logprobs" in (body.include or []) and (stream or response_format == "json")
    words = "word" in (body.timestamp_granularities or []) and response_format == "verbose_json"
    request = TranscriptionRequest(
        samples,
        task="transcribe",
        language=check_language(body.language, speech),
        prompt_ids=prompt_ids(body.prompt, speech),
        word_timestamps=words,
        logprobs=logprobs,
    )
    return SpeechPlan(_at_temperature(request, body.temperature), response_format, stream, words, logprobs)


def translation_plan(body: models.TranslationForm, samples: np.ndarray, speech: SpeechService) -> SpeechPlan:
    if not speech.translates:
        raise ApiError(
            400,
            f"'{speech.name}' is an English-only model: it transcribes English but does not translate. "
            "Start the server with a multilingual Whisper model (--speech-model) to translate.",
            code="model_not_supported",
            param="model",
        )
    request = TranscriptionRequest(samples, task="translate", prompt_ids=prompt_ids(body.prompt, speech))
    return SpeechPlan(_at_temperature(request, body.temperature), body.response_format or "json", False, False, False)


def _at_temperature(request: TranscriptionRequest, temperature: float | None) -> TranscriptionRequest:
    """A temperature above 0 decodes at it alone; 0 or none keeps the request's fallback ladder
    (Whisper's, from 0), as OpenAI documents 0: "the model will use log probability to automatically
    increase the temperature until certain thresholds are hit"."""
    return request if not temperature else replace(request, temperatures=(temperature,))
