"""The host side of decoding a window, as faster-whisper does it: segments cut at timestamp
pairs and where the next window starts, the prompt, and the fallback decisions."""

import pytest

from engine.tasks.transcribe.segmenting import (
    Attempt,
    Piece,
    chosen_attempt,
    compression_ratio,
    max_new_tokens,
    split_at_timestamps,
    window_prompt,
)

TB = 1000  # the first timestamp token: TB + k stands for k * 20 ms


def test_pairs_of_timestamps_cut_segments_and_a_lone_last_one_moves_to_the_window_end() -> None:
    tokens = [TB, 1, 2, TB + 50, TB + 50, 3, TB + 100]
    pieces, seek, single = split_at_timestamps(tokens, TB, 300, 1100)
    assert single
    assert pieces == [
        Piece(3.0, 4.0, (TB, 1, 2, TB + 50), 0),
        Piece(4.0, 5.0, (TB + 50, 3, TB + 100), 4),
    ]
    assert seek == 300 + 1100


def test_an_unfinished_last_segment_is_dropped_and_the_next_window_starts_at_its_timestamp() -> None:
    tokens = [TB, 1, TB + 40, TB + 40, 2, 3]
    pieces, seek, single = split_at_timestamps(tokens, TB, 0, 3000)
    assert not single
    assert pieces == [Piece(0.0, 0.8, (TB, 1, TB + 40), 0)]
    assert seek == 80  # 40 timestamp steps of two frames


def test_without_a_pair_the_window_is_one_segment_up_to_its_last_timestamp() -> None:
    pieces, seek, _ = split_at_timestamps([TB + 5, 1, 2, TB + 60], TB, 100, 3000)
    assert pieces == [Piece(1.0, 1.0 + 1.2, (TB + 5, 1, 2, TB + 60), 0)]
    assert seek == 3100
    pieces, seek, _ = split_at_timestamps([1, 2], TB, 0, 1234)
    assert pieces == [Piece(0.0, 12.34, (1, 2), 0)]
    assert seek == 1234


def test_the_prompt_holds_the_last_half_context_of_previous_text() -> None:
    assert window_prompt([], 7, [9, 10, 11], 448) == [9, 10, 11]
    previous = list(range(300))
    prompt = window_prompt(previous, 7, [9], 448)
    assert prompt[0] == 7 and prompt[1:-1] == previous[-223:] and prompt[-1] == 9
    assert max_new_tokens(4, 448) == 224
    assert max_new_tokens(227, 448) == 222


def attempt(logprobs: list[float], ratio: float = 1.5, no_speech: float = 0.1, temperature: float = 0.0) -> Attempt:
    return Attempt(tuple(range(len(logprobs) - 1)), tuple(logprobs), temperature, no_speech, ratio)


def test_an_attempt_fails_when_repetitive_or_unlikely_unless_it_is_silence() -> None:
    good = attempt([-0.1, -0.2, -0.3])
    assert good.avg_logprob == pytest.approx(-0.2)
    assert not good.failed and not good.silent
    assert attempt([-0.1, -0.2, -0.3], ratio=2.5).failed
    unlikely = attempt([-2.0, -1.5, -1.0])
    assert unlikely.failed
    silence = attempt([-2.0, -1.5, -1.0], no_speech=0.7)
    assert silence.silent and not silence.failed
    # A likely attempt is speech whatever the no-speech probability says.
    assert not attempt([-0.1, -0.1], no_speech=0.9).silent


def test_when_every_attempt_fails_the_likeliest_non_repetitive_one_is_kept_at_the_last_temperature() -> None:
    attempts = [
        attempt([-1.5, -1.5], temperature=0.0),
        attempt([-1.1, -1.2], temperature=0.2),
        attempt([-0.5, -0.5], ratio=3.0, temperature=0.4),
    ]
    kept = chosen_attempt(attempts)
    assert kept.tokens == attempts[1].tokens and kept.temperature == 0.4
    assert chosen_attempt([attempt([-0.1, -0.1])]) == attempt([-0.1, -0.1])
    all_repetitive = [attempt([-0.9, -0.9], ratio=3.0), attempt([-0.2, -0.3], ratio=2.6, temperature=0.2)]
    assert chosen_attempt(all_repetitive).logprobs == (-0.2, -0.3)


def test_compression_ratio_is_high_for_repetition() -> None:
    assert compression_ratio(" ask not what your country can do for you" * 10) > 2.4
    assert compression_ratio(" And so, my fellow Americans, ask not.") < 2.4
