"""Whisper's logit rules on the device over a batch of lanes (CTranslate2's, which faster-whisper
decodes with), on a vocabulary of ten text tokens, the end of text, three special tokens and six
timestamps."""

import jax
import jax.numpy as jnp
import numpy as np

from engine.tasks.transcribe.logit_rules import LaneHistory, RuleTokens, apply_rules, draw

EOT, SOT, SUPPRESSED, NO_TIMESTAMPS, TB, VOCAB = 10, 11, 12, 13, 14, 20
RULES = RuleTokens(
    vocab_size=VOCAB,
    eot=EOT,
    no_timestamps=NO_TIMESTAMPS,
    timestamp_begin=TB,
    suppress=(3, SOT, SUPPRESSED),
    begin_suppress=(0, EOT),
    max_initial_timestamp=2,
)


def allowed(drawn: list[int], logits: np.ndarray | None = None) -> set[int]:
    """The tokens the rules leave after `drawn` (this window's tokens so far); by default text and
    the end of text are likelier than all timestamps together (no timestamp is forced)."""
    history = LaneHistory(*(jnp.asarray([x], jnp.int32) for x in _history(drawn)))
    if logits is None:
        logits = np.zeros(VOCAB, np.float32)
        logits[: EOT + 1] = 2.0
    row = jnp.asarray(logits[None], jnp.float32)
    ruled = np.asarray(apply_rules(row, history, RULES))[0]
    return {int(i) for i in np.flatnonzero(np.isfinite(ruled))}


def _history(drawn: list[int]) -> tuple[int, int, int, int]:
    last = drawn[-1] if drawn else -1
    penultimate = drawn[-2] if len(drawn) > 1 else -1
    timestamps = [t for t in drawn if t >= TB]
    return len(drawn), last, penultimate, timestamps[-1] if timestamps else -1


TEXT = set(range(10)) - {3}
TIMESTAMPS = set(range(TB, VOCAB))


def test_a_window_starts_with_a_timestamp_no_later_than_the_initial_limit() -> None:
    assert allowed([]) == {TB, TB + 1, TB + 2}


def test_timestamps_come_in_pairs_and_never_decrease() -> None:
    # The first timestamp counts as a pair: text (or the end) follows.
    assert allowed([TB]) == TEXT | {EOT}
    # After text, a timestamp no earlier than the last one, or more text.
    assert allowed([TB + 1, 5]) == TEXT | {EOT} | (TIMESTAMPS - {TB})
    # After a lone timestamp, its pair or the end of text; never an earlier one.
    assert allowed([TB, 5, TB + 3]) == {EOT} | (TIMESTAMPS - {TB, TB + 1, TB + 2})
    # After a pair, text.
    assert allowed([TB, 5, TB + 3, TB + 3]) == TEXT | {EOT}


def test_suppressed_tokens_stay_banned_and_the_blank_only_at_the_start() -> None:
    later = allowed([TB, 5])
    assert 3 not in later and SOT not in later and SUPPRESSED not in later and NO_TIMESTAMPS not in later
    assert 0 in later and EOT in later


def test_a_timestamp_is_forced_when_the_timestamps_together_beat_every_text_token() -> None:
    logits = np.zeros(VOCAB, np.float32)
    logits[5] = 2.0  # the likeliest single token
    logits[TB:] = 1.5  # but six timestamps together are likelier
    assert allowed([TB, 5], logits) == TIMESTAMPS
    logits[TB:] = -5.0
    assert allowed([TB, 5], logits) == TEXT | {EOT} | TIMESTAMPS


def test_lanes_are_ruled_apart_in_one_batch() -> None:
    histories = [_history([]), _history([TB, 5, TB + 3, TB + 3])]
    history = LaneHistory(*(jnp.asarray(column, jnp.int32) for column in zip(*histories, strict=True)))
    logits = np.zeros((2, VOCAB), np.float32)
    logits[:, : EOT + 1] = 2.0
    ruled = np.asarray(apply_rules(jnp.asarray(logits), history, RULES))
    assert set(np.flatnonzero(np.isfinite(ruled[0]))) == {TB, TB + 1, TB + 2}
    assert set(np.flatnonzero(np.isfinite(ruled[1]))) == TEXT | {EOT}


def test_the_draw_is_the_argmax_at_temperature_zero_with_its_log_probability() -> None:
    logits = jnp.asarray([[0.0, 3.0, 1.0, -jnp.inf], [2.0, 0.0, 0.0, 0.0]])
    keys = jax.vmap(jax.random.key)(jnp.arange(2, dtype=jnp.uint32))
    token, logprob = draw(logits, jnp.asarray([0.0, 0.0]), keys)
    assert token.tolist() == [1, 0]
    expected = jax.nn.log_softmax(logits, axis=-1)
    np.testing.assert_allclose(np.asarray(logprob), [expected[0, 1], expected[1, 0]], rtol=1e-6)


def test_a_sample_follows_the_ruled_distribution_at_its_temperature() -> None:
    draws = 4000
    ruled = jnp.log(jnp.tile(jnp.asarray([[0.1, 0.0, 0.6, 0.3]]), (draws, 1)))  # token 1 banned
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(7), i))(jnp.arange(draws))
    tokens, logprobs = draw(ruled, jnp.ones(draws), keys)
    counts = np.bincount(np.asarray(tokens), minlength=4) / draws
    np.testing.assert_allclose(counts, [0.1, 0.0, 0.6, 0.3], atol=0.03)
    np.testing.assert_allclose(np.exp(np.asarray(logprobs)), np.asarray([0.1, 0.0, 0.6, 0.3])[np.asarray(tokens)])
    hot, _ = draw(ruled, jnp.full(draws, 100.0), keys)  # near uniform over the allowed tokens
    assert set(np.unique(np.asarray(hot))) == {0, 2, 3}
