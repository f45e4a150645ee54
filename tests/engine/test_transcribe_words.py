"""Word timing from cross-attention as openai-whisper computes it: the median filter, dynamic time
warping (against a cell-by-cell reference), words split from token bytes, punctuation merged into
its words, and the words spread over a window's segments."""

import numpy as np
import pytest

from engine.tasks.transcribe.segmenting import Piece
from engine.tasks.transcribe.word_alignment import (
    TimedWord,
    attention_matrix,
    dtw,
    median_filter,
    merge_punctuations,
    split_words,
    timed_words,
)
from engine.tasks.transcribe.word_timestamps import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS, place_words

EOT = 9
TOKEN_BYTES = (b" And", b" so", b",", b" my", b" fell", b"ow", b" \xe4\xb8", b"\xad", b".", b"<|endoftext|>")


def reference_dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """openai-whisper's dtw_cpu and backtrace, a cell at a time."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf)
    trace = -np.ones((n + 1, m + 1))
    cost[0, 0] = 0
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j] = x[i - 1, j - 1] + c
            trace[i, j] = t
    i, j = n, m
    trace[0, :] = 2
    trace[:, 0] = 1
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        if trace[i, j] == 0:
            i, j = i - 1, j - 1
        elif trace[i, j] == 1:
            i -= 1
        else:
            j -= 1
    result = np.array(path)[::-1].T
    return result[0], result[1]


@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (12, 40), (40, 12)])
def test_dtw_finds_the_reference_path(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    cost = rng.normal(size=shape)
    for got, want in zip(dtw(cost), reference_dtw(cost), strict=True):
        np.testing.assert_array_equal(got, want)
    ties = np.zeros(shape)  # equal costs everywhere: the reference's tie-breaks decide
    for got, want in zip(dtw(ties), reference_dtw(ties), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_median_filter_reflects_at_the_edges() -> None:
    x = np.array([[5.0, 1.0, 4.0, 2.0, 8.0, 0.0, 3.0, 7.0]])
    padded = np.concatenate([x[:, 3:0:-1], x, x[:, -2:-5:-1]], axis=1)
    want = np.array([[np.median(padded[0, i : i + 7]) for i in range(x.shape[1])]])
    np.testing.assert_array_equal(median_filter(x, 7), want)
    short = np.array([[1.0, 2.0]])
    np.testing.assert_array_equal(median_filter(short, 7), short)


def test_words_split_at_spaces_punctuation_and_whole_characters() -> None:
    words, tokens = split_words([0, 1, 2, 3, 4, 5, 6, 7, 8, EOT], TOKEN_BYTES, EOT, "en")
    assert words == [" And", " so", ",", " my", " fellow", " 中", ".", "<|endoftext|>"]
    assert tokens == [[0], [1], [2], [3], [4, 5], [6, 7], [8], [EOT]]
    words, _ = split_words([4, 5, 6, 7, EOT], TOKEN_BYTES, EOT, "zh")
    assert words == [" fell", "ow", " 中", "<|endoftext|>"]


def test_punctuation_joins_its_word() -> None:
    alignment = [
        TimedWord(" (", [1], 0.0, 0.1, 1.0),
        TimedWord(" so", [2], 0.1, 0.2, 1.0),
        TimedWord(",", [3], 0.2, 0.3, 1.0),
        TimedWord(" my", [4], 0.3, 0.4, 1.0),
    ]
    merge_punctuations(alignment, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS)
    assert [(w.word, w.tokens) for w in alignment] == [("", []), (" ( so,", [1, 2, 3]), ("", []), (" my", [4])]


def test_a_diagonal_attention_times_each_word_where_its_row_advances() -> None:
    """Three one-token words over 30 positions, each attended for 10 in turn."""
    sot_length, text = 1, [0, 1, 3]
    rows = sot_length + 1 + len(text) + 1  # sot, no-timestamps, text, end of text
    scores = np.full((2, rows, 40), -10.0)
    for word in range(3):
        scores[:, sot_length + word, word * 10 : word * 10 + 10] = 10.0
    scores[:, sot_length + 3, 25:30] = 10.0
    weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
    matrix = attention_matrix(weights, 30, sot_length)
    assert matrix.shape == (len(text) + 1, 30)
    words = timed_words(matrix, [0.9, 0.8, 0.7], text, TOKEN_BYTES, EOT, "en")
    assert [w.word for w in words] == [" And", " so", " my"]
    assert [(w.start, w.end) for w in words] == [(0.0, 0.2), (0.2, 0.4), (0.4, 0.5)]
    assert [w.probability for w in words] == pytest.approx([0.9, 0.8, 0.7])


def test_words_are_placed_in_their_segments_from_the_audio_start() -> None:
    TB = 100
    pieces = [Piece(10.0, 10.6, (TB, 0, 1, TB + 30), 0), Piece(10.6, 11.0, (TB + 30, 3, TB + 50), 4)]
    alignment = [
        TimedWord(" And", [0], 0.0, 0.3, 0.9),
        TimedWord(" so", [1], 0.3, 0.6, 0.8),
        TimedWord(" my", [3], 0.6, 0.9, 0.7),
    ]
    placed = place_words(pieces, alignment, EOT + 1, 1000, 0.0)
    assert [[(w.start, w.end, w.tokens) for w in p.words] for p in placed] == [
        [(10.0, 10.3, (0,)), (10.3, 10.6, (1,))],
        [(10.6, 10.9, (3,))],
    ]
    assert [(p.start, p.end) for p in placed] == [(10.0, 10.6), (10.6, 10.9)]
