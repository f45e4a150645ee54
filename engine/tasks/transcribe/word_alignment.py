"""From the alignment heads' cross-attention to timed words, as openai-whisper's `find_alignment`
and CTranslate2's `align` compute it: the heads' attention over the window's audio frames
(softmaxed over the frames that hold audio), normalized over the tokens, median-filtered over
time, averaged over the heads; dynamic time warping of its negation pairs each text token with a
frame, and a word starts at the frame where its first token's row first advances.

Words are split from the tokens' bytes: at spaces and punctuation (`split_words`), or, for the
languages written without spaces, wherever the tokens so far decode to whole characters.
"""

import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TOKENS_PER_SECOND = 50  # encoder positions a second: the alignment's time step
MEDIAN_FILTER_WIDTH = 7
# Languages written without spaces between words: split wherever the tokens make whole characters.
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
REPLACEMENT = "\ufffd"


@dataclass
class TimedWord:
    """A word of the alignment: its text (to merge punctuation), tokens, times in seconds from
    the window's start, and its tokens' mean probability."""

    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def attention_matrix(weights: np.ndarray, audio_positions: int, sot_length: int) -> np.ndarray:
    """weights float32[heads, tokens, positions]: the alignment heads' attention (softmaxed over
    all positions) of the sequence sot_sequence + <|notimestamps|> + text + <|endoftext|>;
    `audio_positions`: the encoder positions that hold audio. Returns [text + 1, audio_positions]:
    the rows of <|notimestamps|> and the text tokens (each the row that predicts the next token).
    openai-whisper softmaxes over the audio's positions alone: the weights cut there, each row
    divided by its sum."""
    probs = weights[:, :, :audio_positions].astype(np.float64)
    probs /= probs.sum(axis=-1, keepdims=True)
    mean = probs.mean(axis=-2, keepdims=True)
    std = probs.std(axis=-2, keepdims=True)
    normalized = (probs - mean) / std
    return median_filter(normalized, MEDIAN_FILTER_WIDTH).mean(axis=0)[sot_length:-1]


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """The median over a window of `width` (odd) along the last axis, reflect-padded at the ends."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.sort(windows, axis=-1)[..., pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through cost[N, M] from (0, 0) to (N-1, M-1), by steps down,
    right or diagonal (openai-whisper's `dtw_cpu` and `backtrace`, its ties included). Returns
    (row indices, column indices) along the path. The cells are filled an anti-diagonal at a time."""
    rows, cols = cost.shape
    total = np.full((rows + 1, cols + 1), np.inf)
    trace = np.full((rows + 1, cols + 1), -1, np.int8)
    total[0, 0] = 0.0
    for diagonal in range(2, rows + cols + 1):
        i = np.arange(max(1, diagonal - cols), min(rows, diagonal - 1) + 1)
        j = diagonal - i
        c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
        step = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2))
        total[i, j] = cost[i - 1, j - 1] + np.choose(step, [c0, c1, c2])
        trace[i, j] = step
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = rows, cols
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        move = trace[i, j]
        if move == 0:
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    indices = np.array(path[::-1]).T
    return indices[0], indices[1]


def decode(tokens: Sequence[int], token_bytes: Sequence[bytes]) -> str:
    return b"".join(token_bytes[t] for t in tokens).decode("utf-8", errors="replace")


def split_on_unicode(tokens: Sequence[int], token_bytes: Sequence[bytes]) -> tuple[list[str], list[list[int]]]:
    """Cut wherever the tokens so far decode to whole characters (a replacement character that
    the whole sequence also holds there is its own)."""
    full = decode(tokens, token_bytes)
    words: list[str] = []
    word_tokens: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for token in tokens:
        current.append(token)
        decoded = decode(current, token_bytes)
        at = decoded.find(REPLACEMENT)
        if at < 0 or (offset + at < len(full) and full[offset + at] == REPLACEMENT):
            words.append(decoded)
            word_tokens.append(current)
            current = []
            offset += len(decoded)
    return words, word_tokens


def split_words(
    tokens: Sequence[int], token_bytes: Sequence[bytes], eot: int, language: str
) -> tuple[list[str], list[list[int]]]:
    """The words of `tokens` (text tokens and a final end of text) and the tokens of each."""
    subwords, subword_tokens = split_on_unicode(tokens, token_bytes)
    if language in UNSPACED_LANGUAGES:
        return subwords, subword_tokens
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for subword, pieces in zip(subwords, subword_tokens, strict=True):
        special = pieces[0] >= eot
        punctuation = subword.strip() in string.punctuation  # a substring test, as whisper's
        if special or subword.startswith(" ") or punctuation or not words:
            words.append(subword)
            word_tokens.append(pieces)
        else:
            words[-1] += subword
            word_tokens[-1].extend(pieces)
    return words, word_tokens


def timed_words(
    matrix: np.ndarray,
    text_token_probs: np.ndarray,
    text_tokens: Sequence[int],
    token_bytes: Sequence[bytes],
    eot: int,
    language: str,
) -> list[TimedWord]:
    """The words of `text_tokens` timed by the path through -matrix (`attention_matrix`'s)."""
    words, word_tokens = split_words([*text_tokens, eot], token_bytes, eot, language)
    if len(word_tokens) <= 1:
        return []
    text_indices, time_indices = dtw(-matrix)
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND
    starts = jump_times[boundaries[:-1]]
    ends = jump_times[boundaries[1:]]
    return [
        TimedWord(word, tokens, float(start), float(end), float(np.mean(text_token_probs[i:j])))
        for word, tokens, start, end, i, j in zip(
            words, word_tokens, starts, ends, boundaries[:-1], boundaries[1:], strict=False
        )
    ]


def merge_punctuations(alignment: list[TimedWord], prepended: str, appended: str) -> None:
    """Joins opening punctuation to the word after it and closing punctuation to the word before
    it (the emptied words stay, with no text and no tokens)."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        previous, following = alignment[i], alignment[j]
        if previous.word.startswith(" ") and previous.word.strip() in prepended:
            following.word = previous.word + following.word
            following.tokens = previous.tokens + following.tokens
            previous.word, previous.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        previous, following = alignment[i], alignment[j]
        if not previous.word.endswith(" ") and following.word in appended:
            previous.word = previous.word + following.word
            previous.tokens = previous.tokens + following.tokens
            following.word, following.tokens = "", []
        else:
            i = j
        j += 1
