"""One transcription request's progress over its windows, on the host: where its next window
starts, the previous text its prompt holds, the attempts of its current window, and the
segments it has sent. The runner (transcribe_task.py) decodes; this decides."""

import secrets
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from engine.api import SPEECH_SAMPLE_RATE, SpeechSegment, SpeechWord, TranscriptionRequest
from engine.model.families.whisper import WhisperVocabulary
from engine.tasks.task_registry import TaskJob
from engine.tasks.transcribe.segmenting import (
    FRAMES_PER_SECOND,
    PROMPT_RESET_ON_TEMPERATURE,
    WINDOW_FRAMES,
    Attempt,
    Piece,
    compression_ratio,
    split_at_timestamps,
    window_prompt,
)
from engine.tasks.transcribe.word_alignment import decode
from engine.tasks.transcribe.word_timestamps import TimedPiece


@dataclass(frozen=True)
class Window:
    """A window decoded but not yet sent: its segments, and where the next window starts."""

    seek: int
    frames: int
    attempt: Attempt
    pieces: list[Piece]
    next_seek: int
    single_ending: bool


@dataclass(eq=False)
class Transcription:
    job: TaskJob[TranscriptionRequest]
    vocabulary: WhisperVocabulary
    mel: Future[np.ndarray]  # the log-mel spectrogram [n_mels, frames of audio], computed on the runner's thread
    seek: int = 0
    language: str | None = None
    language_probability: float = 1.0
    previous: list[int] = field(default_factory=list)  # the prompt's text, then the kept segments' tokens
    reset_since: int = 0  # `previous` from here conditions the next window
    attempts: list[Attempt] = field(default_factory=list)  # of the window being decoded
    sent: int = 0  # segments sent
    output_tokens: int = 0
    last_speech: float = 0.0  # seconds: the last word's end (word timestamps)
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        request = self.job.request
        self.previous = list(request.prompt_ids)
        seed = request.seed if request.seed is not None else secrets.randbits(63)
        self.rng = np.random.default_rng(seed)
        if request.language is not None:
            self.language = request.language
        elif not self.vocabulary.multilingual:
            self.language = "en"

    @property
    def request(self) -> TranscriptionRequest:
        return self.job.request

    @property
    def frames(self) -> int:
        """The audio's mel frames."""
        return len(self.request.audio) // (SPEECH_SAMPLE_RATE // FRAMES_PER_SECOND)

    @property
    def finished(self) -> bool:
        return self.seek >= self.frames

    def window_frames(self) -> int:
        return min(WINDOW_FRAMES, self.frames - self.seek)

    def sot_sequence(self) -> list[int]:
        vocabulary = self.vocabulary
        if not vocabulary.multilingual:
            return [vocabulary.sot]
        assert self.language is not None
        task = vocabulary.translate if self.request.task == "translate" else vocabulary.transcribe
        return [vocabulary.sot, vocabulary.languages[self.language], task]

    def prompt(self, text_ctx: int) -> list[int]:
        return window_prompt(self.previous[self.reset_since :], self.vocabulary.sot_prev, self.sot_sequence(), text_ctx)

    def temperature(self) -> float:
        """The temperature of the window's next attempt."""
        return self.request.temperatures[len(self.attempts)]

    def attempt_seed(self) -> int:
        return int(self.rng.integers(2**32, dtype=np.uint64))

    def record(self, tokens: Sequence[int], logprobs: Sequence[float], temperature: float, no_speech: float) -> bool:
        """Keeps a decoded attempt; whether the window needs another (it failed and a temperature is left)."""
        text = decode([t for t in tokens if t < self.vocabulary.eot], self.vocabulary.token_bytes).strip()
        attempt = Attempt(tuple(tokens), tuple(logprobs), temperature, no_speech, compression_ratio(text))
        self.attempts.append(attempt)
        return attempt.failed and len(self.attempts) < len(self.request.temperatures)

    def conclude(self, attempt: Attempt) -> Window | None:
        """The window decoded as `attempt`: None (and the seek moved past it) when it is silence."""
        frames = self.window_frames()
        self.attempts = []
        if attempt.silent:
            self.seek += frames
            return None
        pieces, next_seek, single_ending = split_at_timestamps(
            attempt.tokens, self.vocabulary.timestamp_begin, self.seek, frames
        )
        return Window(self.seek, frames, attempt, pieces, next_seek, single_ending)

    def segments(self, window: Window, placed: Sequence[TimedPiece]) -> list[SpeechSegment]:
        """The window's segments to send, in order, and the state moved past it: the seek (to its
        last word's end with word timestamps, unless it ended on a single timestamp), the previous
        text, and the prompt's reset after a hot attempt."""
        self.seek = window.next_seek
        if self.request.word_timestamps:
            last_end = _speech_end(placed)
            if last_end is not None:
                if not window.single_ending and last_end > window.seek / FRAMES_PER_SECOND:
                    self.seek = round(last_end * FRAMES_PER_SECOND)
                self.last_speech = last_end
        if self.seek <= window.seek:  # a window that ends at its own start would be decoded forever
            self.seek = window.seek + window.frames
        eot = self.vocabulary.eot
        attempt = window.attempt
        out = []
        for piece in placed:
            text_tokens = tuple(t for t in piece.tokens if t < eot)
            if piece.start == piece.end or not decode(text_tokens, self.vocabulary.token_bytes).strip():
                continue
            self.previous.extend(piece.tokens)
            self.output_tokens += len(text_tokens)
            out.append(
                SpeechSegment(
                    index=self.sent,
                    seek=window.seek / FRAMES_PER_SECOND,
                    start=piece.start,
                    end=piece.end,
                    tokens=text_tokens,
                    temperature=attempt.temperature,
                    avg_logprob=attempt.avg_logprob,
                    compression_ratio=attempt.compression_ratio,
                    no_speech_prob=attempt.no_speech_prob,
                    words=tuple(SpeechWord(w.start, w.end, w.tokens, w.probability) for w in piece.words),
                    logprobs=self._logprobs(piece, attempt) if self.request.logprobs else (),
                )
            )
            self.sent += 1
        if attempt.temperature > PROMPT_RESET_ON_TEMPERATURE:
            self.reset_since = len(self.previous)
        return out

    def _logprobs(self, piece: TimedPiece, attempt: Attempt) -> tuple[float, ...]:
        """The log-probabilities of the piece's text tokens."""
        eot = self.vocabulary.eot
        logprobs = attempt.logprobs[piece.offset : piece.offset + len(piece.tokens)]
        return tuple(lp for t, lp in zip(piece.tokens, logprobs, strict=True) if t < eot)


def _speech_end(placed: Sequence[TimedPiece]) -> float | None:
    """The last word's end, or the last segment's end where no segment has words (faster-whisper's `get_end`)."""
    ends = [p.words[-1].end for p in placed if p.words]
    if ends:
        return ends[-1]
    return placed[-1].end if placed else None
