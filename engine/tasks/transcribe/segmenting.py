"""The host side of decoding one 30-second window, as faster-whisper (1.2.1) does it over
CTranslate2: the prompt a window is decoded from, the decision whether a decoded attempt failed
(so the window is decoded again at the next temperature) or is silence, and the split of its
tokens into segments at their timestamp tokens, with where the next window starts (`seek`).

Times: the mel spectrogram has a frame every 10 ms (`FRAMES_PER_SECOND`), a window holds
`WINDOW_FRAMES` of them, and a timestamp token counts 20 ms (`TIME_PRECISION`) from its window's
start (the encoder halves the frames, `INPUT_STRIDE`).
"""

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

WINDOW_FRAMES = 3000  # 30 s of 10 ms mel frames: what the encoder takes
FRAMES_PER_SECOND = 100
INPUT_STRIDE = 2  # mel frames per encoder position (and per timestamp step)
TIME_PRECISION = INPUT_STRIDE / FRAMES_PER_SECOND  # seconds a timestamp token counts
MAX_INITIAL_TIMESTAMP = 1.0  # seconds: the latest first timestamp of a window
# A failed attempt: text that compresses too well (repetition) or is too unlikely.
COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6  # with an unlikely attempt, the window is silence and skipped
# A window decoded above this temperature does not condition the next one on its text.
PROMPT_RESET_ON_TEMPERATURE = 0.5


@dataclass(frozen=True)
class Attempt:
    """One decode of a window at one temperature: its tokens without the end of text, and the
    log-probability of each (and of the end of text, last)."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]  # len(tokens) + 1 when it ended with the end of text
    temperature: float
    no_speech_prob: float
    compression_ratio: float

    @property
    def avg_logprob(self) -> float:
        """As faster-whisper recovers it: the sum over the tokens and the end of text, over
        len(tokens) + 1."""
        return sum(self.logprobs) / (len(self.tokens) + 1)

    @property
    def failed(self) -> bool:
        """Whether the window is decoded again at the next temperature: too repetitive or too
        unlikely, unless it is silence."""
        repetitive = self.compression_ratio > COMPRESSION_RATIO_THRESHOLD
        unlikely = self.avg_logprob < LOGPROB_THRESHOLD
        return (repetitive or unlikely) and not self.silent

    @property
    def silent(self) -> bool:
        """No speech: the no-speech probability is high and the text unlikely."""
        return self.no_speech_prob > NO_SPEECH_THRESHOLD and self.avg_logprob < LOGPROB_THRESHOLD


def chosen_attempt(attempts: Sequence[Attempt]) -> Attempt:
    """The attempt a window keeps once its last one was decoded: that last one unless it failed;
    when every one failed, the likeliest of those that were not repetitive (or of all), carrying
    the last temperature (the prompt reset reads it)."""
    last = attempts[-1]
    if not last.failed:
        return last
    candidates = [a for a in attempts if a.compression_ratio <= COMPRESSION_RATIO_THRESHOLD] or list(attempts)
    best = max(candidates, key=lambda a: a.avg_logprob)
    return Attempt(best.tokens, best.logprobs, last.temperature, best.no_speech_prob, best.compression_ratio)


def compression_ratio(text: str) -> float:
    """The gzip compression ratio of `text`'s UTF-8 bytes (high: repetitive)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def window_prompt(previous: Sequence[int], sot_prev: int, sot_sequence: Sequence[int], text_ctx: int) -> list[int]:
    """The decoder's prompt: `<|startofprev|>` and the last previous-text tokens (at most half the
    text context less one), then the start-of-transcript sequence."""
    prompt: list[int] = []
    if previous:
        prompt.append(sot_prev)
        prompt.extend(previous[-(text_ctx // 2 - 1) :])
    prompt.extend(sot_sequence)
    return prompt


def max_new_tokens(prompt_length: int, text_ctx: int) -> int:
    """The most tokens (the end of text included) one attempt draws: half the text context, or
    what the context leaves after the prompt (CTranslate2's limit)."""
    return min(text_ctx // 2, text_ctx - prompt_length + 1)


@dataclass(frozen=True)
class Piece:
    """A segment cut from a window's tokens: `tokens` keep their timestamp tokens."""

    start: float
    end: float
    tokens: tuple[int, ...]
    offset: int  # of its first token in the window's tokens


def split_at_timestamps(
    tokens: Sequence[int], timestamp_begin: int, seek: int, window_frames: int
) -> tuple[list[Piece], int, bool]:
    """A window's tokens cut into segments at consecutive timestamp pairs (faster-whisper's
    `_split_segments_by_timestamps`). `seek`: the window's first frame; `window_frames`: its
    frames of audio. Returns the segments, the next window's first frame, and whether the tokens
    end with a single timestamp (no speech after it)."""
    time_offset = seek / FRAMES_PER_SECOND
    single_ending = len(tokens) >= 2 and tokens[-2] < timestamp_begin <= tokens[-1]
    cuts = [i for i in range(1, len(tokens)) if tokens[i] >= timestamp_begin and tokens[i - 1] >= timestamp_begin]
    if not cuts:
        duration = window_frames / FRAMES_PER_SECOND
        timestamps = [t for t in tokens if t >= timestamp_begin]
        if timestamps and timestamps[-1] != timestamp_begin:
            duration = (timestamps[-1] - timestamp_begin) * TIME_PRECISION
        return [Piece(time_offset, time_offset + duration, tuple(tokens), 0)], seek + window_frames, single_ending
    if single_ending:
        cuts.append(len(tokens))
    pieces = []
    last = 0
    for cut in cuts:
        piece = tokens[last:cut]
        start = time_offset + (piece[0] - timestamp_begin) * TIME_PRECISION
        end = time_offset + (piece[-1] - timestamp_begin) * TIME_PRECISION
        pieces.append(Piece(start, end, tuple(piece), last))
        last = cut
    if single_ending:
        return pieces, seek + window_frames, True
    return pieces, seek + (tokens[last - 1] - timestamp_begin) * INPUT_STRIDE, False
