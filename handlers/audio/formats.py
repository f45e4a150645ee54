"""The engine's segments as each response format writes them: JSON, verbose JSON, text, SRT, VTT.

Text comes from the speech model's tokenizer: a segment's text is its tokens decoded (with the
leading space Whisper's tokens carry), the whole text the segments' joined and stripped, a word
its tokens decoded and stripped. Timestamps in SRT are `HH:MM:SS,mmm` and in VTT `HH:MM:SS.mmm`,
rounded to the millisecond.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fastapi.responses import PlainTextResponse, Response

from engine.api import SpeechSegment, Transcribed
from generated import models
from handlers.audio.request import ResponseFormat
from text import Tokenizer

# The audio encoder's positions a second of audio takes (Whisper: 1500 for 30 s).
AUDIO_TOKENS_PER_SECOND = 50
# Whisper's seek unit: mel frames of 10 ms.
FRAMES_PER_SECOND = 100


def segment_text(segment: SpeechSegment, tokenizer: Tokenizer) -> str:
    return tokenizer.decode(list(segment.tokens))


def whole_text(texts: Sequence[str]) -> str:
    return "".join(texts).strip()


def logprobs(segment: SpeechSegment, tokenizer: Tokenizer) -> list[models.TranscriptionLogprob]:
    entries = []
    for token, logprob in zip(segment.tokens, segment.logprobs, strict=False):
        text = tokenizer.decode([token])
        entries.append(models.TranscriptionLogprob(token=text, logprob=logprob, bytes=list(text.encode())))
    return entries


def all_logprobs(segments: Sequence[SpeechSegment], tokenizer: Tokenizer) -> list[models.TranscriptionLogprob]:
    return [entry for segment in segments for entry in logprobs(segment, tokenizer)]


def token_usage(prompt_tokens: int, done: Transcribed) -> models.TranscriptionTokenUsage:
    audio_tokens = math.ceil(done.duration * AUDIO_TOKENS_PER_SECOND)
    return models.TranscriptionTokenUsage(
        type="tokens",
        input_tokens=prompt_tokens + audio_tokens,
        input_token_details=models.TranscriptionTokenDetails(text_tokens=prompt_tokens, audio_tokens=audio_tokens),
        output_tokens=done.output_tokens,
        total_tokens=prompt_tokens + audio_tokens + done.output_tokens,
    )


def api_segment(segment: SpeechSegment, text: str) -> models.TranscriptionSegment:
    return models.TranscriptionSegment(
        id=segment.index,
        seek=round(segment.seek * FRAMES_PER_SECOND),
        start=segment.start,
        end=segment.end,
        text=text,
        tokens=list(segment.tokens),
        temperature=segment.temperature,
        avg_logprob=segment.avg_logprob,
        compression_ratio=segment.compression_ratio,
        no_speech_prob=segment.no_speech_prob,
    )


def api_words(segments: Sequence[SpeechSegment], tokenizer: Tokenizer) -> list[models.TranscriptionWord]:
    return [
        models.TranscriptionWord(word=tokenizer.decode(list(word.tokens)).strip(), start=word.start, end=word.end)
        for segment in segments
        for word in segment.words
    ]


def timestamp(seconds: float, separator: str) -> str:
    """`HH:MM:SS` then `separator` and milliseconds (SRT's `,`, VTT's `.`)."""
    milliseconds = max(0, round(seconds * 1000))
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    secs, milliseconds = divmod(milliseconds, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{milliseconds:03d}"


def srt(segments: Sequence[SpeechSegment], texts: Sequence[str]) -> str:
    cues = [
        f"{number}\n{timestamp(segment.start, ',')} --> {timestamp(segment.end, ',')}\n{text.strip()}\n"
        for number, (segment, text) in enumerate(zip(segments, texts, strict=True), start=1)
    ]
    return "\n".join(cues)


def vtt(segments: Sequence[SpeechSegment], texts: Sequence[str]) -> str:
    cues = [
        f"{timestamp(segment.start, '.')} --> {timestamp(segment.end, '.')}\n{text.strip()}\n"
        for segment, text in zip(segments, texts, strict=True)
    ]
    return "\n".join(["WEBVTT\n", *cues])


def plain_text(response_format: ResponseFormat, segments: Sequence[SpeechSegment], texts: Sequence[str]) -> Response:
    if response_format == "srt":
        body = srt(segments, texts)
    elif response_format == "vtt":
        body = vtt(segments, texts)
    else:
        body = whole_text(texts) + "\n"
    return PlainTextResponse(body)
