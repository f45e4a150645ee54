"""A window's timed words spread over its segments, as faster-whisper's `add_word_timestamps`:
words at sentence ends and after pauses no longer than twice the median word, punctuation merged
into its words, each segment's words in seconds from the audio's start (rounded to 10 ms), and the
segment's start and end moved to its words' unless a word is clearly too long."""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.tasks.transcribe.segmenting import FRAMES_PER_SECOND, Piece
from engine.tasks.transcribe.word_alignment import TimedWord, merge_punctuations

PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END_MARKS = ".。!！?？"
MAX_MEDIAN_WORD = 0.7  # seconds: the median word duration's cap


@dataclass(frozen=True)
class Word:
    start: float
    end: float
    tokens: tuple[int, ...]
    probability: float


@dataclass(frozen=True)
class TimedPiece:
    """A segment with its words; its start and end as the words moved them."""

    start: float
    end: float
    tokens: tuple[int, ...]
    offset: int  # of its first token in the window's tokens
    words: tuple[Word, ...]


def untimed(pieces: Sequence[Piece]) -> list[TimedPiece]:
    """The segments as they are, without words."""
    return [TimedPiece(p.start, p.end, p.tokens, p.offset, ()) for p in pieces]


def clip_sentence_ends(alignment: list[TimedWord]) -> tuple[float, float]:
    """Shortens words over twice the median at sentence boundaries; returns (median, max) durations."""
    durations = np.array([w.end - w.start for w in alignment])
    durations = durations[durations.nonzero()]
    median = min(MAX_MEDIAN_WORD, float(np.median(durations)) if len(durations) else 0.0)
    longest = median * 2
    if len(durations):
        for i in range(1, len(alignment)):
            word, before = alignment[i], alignment[i - 1]
            if word.end - word.start > longest:
                if word.word in SENTENCE_END_MARKS:
                    word.end = word.start + longest
                elif before.word in SENTENCE_END_MARKS:
                    word.start = word.end - longest
    return median, longest


def place_words(
    pieces: Sequence[Piece], alignment: list[TimedWord], eot: int, seek: int, last_speech: float
) -> list[TimedPiece]:
    """Spreads the window's `alignment` (timed from the window's start, frame `seek`) over its
    segments in order (`last_speech`: the end of the speech before the window, seconds)."""
    median, longest = clip_sentence_ends(alignment)
    merge_punctuations(alignment, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS)
    offset = seek / FRAMES_PER_SECOND
    placed = []
    index = 0
    for piece in pieces:
        text_count = sum(1 for t in piece.tokens if t < eot)
        words: list[list[float]] = []  # start, end, probability: mutable while the hacks run
        word_tokens: list[tuple[int, ...]] = []
        saved = 0
        while index < len(alignment) and saved < text_count:
            timing = alignment[index]
            if timing.word:
                start, end = round(offset + timing.start, 2), round(offset + timing.end, 2)
                words.append([start, end, timing.probability])
                word_tokens.append(tuple(timing.tokens))
            saved += len(timing.tokens)
            index += 1
        start, end = piece.start, piece.end
        if words:
            first, last = words[0], words[-1]
            long_first = first[1] - first[0] > longest
            long_pair = len(words) > 1 and words[1][1] - first[0] > longest * 2
            if first[1] - last_speech > median * 4 and (long_first or long_pair):
                if len(words) > 1 and words[1][1] - words[1][0] > longest:
                    boundary = max(words[1][1] / 2, words[1][1] - longest)
                    first[1] = words[1][0] = boundary
                first[0] = max(0, first[1] - longest)
            if start < first[1] and start - 0.5 > first[0]:
                first[0] = max(0, min(first[1] - median, start))
            else:
                start = first[0]
            if end > last[0] and end + 0.5 < last[1]:
                last[1] = max(last[0] + median, end)
            else:
                end = last[1]
            last_speech = end
        timed = tuple(Word(w[0], w[1], t, w[2]) for w, t in zip(words, word_tokens, strict=True))
        placed.append(TimedPiece(start, end, piece.tokens, piece.offset, timed))
    return placed
