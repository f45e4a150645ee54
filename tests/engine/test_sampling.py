"""The jitted sampler on its own: each parameter does what its definition says."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.device import sampling
from engine.device.sampling import SamplerInputs, allowed_mask, greedy, plain, sample

V = 64
ROWS = 4


def inputs(rows: int = ROWS, /, **overrides: Any) -> SamplerInputs:
    fields: dict[str, Any] = {
        "temperature": np.ones(rows, np.float32),
        "top_k": np.zeros(rows, np.int32),
        "top_p": np.ones(rows, np.float32),
        "min_p": np.zeros(rows, np.float32),
        "repetition_penalty": np.ones(rows, np.float32),
        "presence_penalty": np.zeros(rows, np.float32),
        "frequency_penalty": np.zeros(rows, np.float32),
        "bias_ids": np.zeros((rows, 3), np.int32),
        "bias_values": np.zeros((rows, 3), np.float32),
        "allowed": np.full((rows, V // 32), -1, np.int32),
        "seed": np.arange(rows, dtype=np.uint32),
        "counter": np.zeros(rows, np.int32),
        "logprobs": np.ones(rows, bool),
        "scored_ids": np.full((rows, 4), -1, np.int32),
        "seen": np.zeros((rows, V), bool),
        "output_counts": np.zeros((rows, V), np.int32),
    }
    for name, value in overrides.items():
        fields[name] = np.broadcast_to(np.asarray(value, fields[name].dtype), fields[name].shape).copy()
    return SamplerInputs(**fields)


def logits(rows: int = ROWS, seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(0, 2, (rows, V)).astype(np.float32))


def draws(x: jax.Array, many: int = 200, **overrides: Any) -> np.ndarray:
    """Tokens chosen over `many` successive counters: [many, rows]."""
    return np.stack([np.asarray(sample(x, inputs(x.shape[0], counter=c, **overrides)).token) for c in range(many)])


def test_top_k_1_equals_greedy() -> None:
    x = logits()
    expected = np.argmax(np.asarray(x), axis=-1)
    assert (draws(x, 20, top_k=1) == expected).all()
    assert (np.asarray(sample(x, inputs(temperature=0.0)).token) == expected).all()


def test_draws_follow_the_softmax_at_the_temperature() -> None:
    """4,000 draws of one row (distinct seeds) land on each token about as often as
    softmax(logits / T) says, and never on a token the grammar bans."""
    row = np.log(np.array([0.5, 0.3, 0.15, 0.05, *([1e-9] * (V - 4))], np.float32))
    x = jnp.asarray(np.tile(row, (4000, 1)))
    allowed = np.full((4000, V // 32), -1, np.int32)
    allowed[:, 0] &= ~(1 << 2)  # token 2 banned
    for temperature in (1.0, 0.5):
        chosen = np.asarray(
            sample(x, inputs(4000, temperature=temperature, seed=np.arange(4000), allowed=allowed)).token
        )
        expected = np.exp(row / temperature) * (np.arange(V) != 2)
        expected /= expected.sum()
        counts = np.bincount(chosen, minlength=V) / len(chosen)
        assert counts[2] == 0
        np.testing.assert_allclose(counts[:4], expected[:4], atol=0.03)


def test_logit_bias_minus_100_bans_a_token() -> None:
    x = logits()
    best = np.argmax(np.asarray(x), axis=-1)
    bias_ids = np.stack([best, best, best], axis=1)
    chosen = np.asarray(sample(x, inputs(temperature=0.0, bias_ids=bias_ids, bias_values=[-100.0, 0, 0])).token)
    assert (chosen != best).all()


def test_min_p_keeps_only_tokens_near_the_best() -> None:
    x = logits()
    probs = np.asarray(jax.nn.softmax(x, axis=-1))
    kept = probs >= 0.3 * probs.max(axis=-1, keepdims=True)
    chosen = draws(x, min_p=0.3)
    assert all(kept[row, chosen[:, row]].all() for row in range(ROWS))


def test_top_p_draws_from_the_nucleus_only() -> None:
    x = logits()
    order = np.argsort(-np.asarray(x), axis=-1)
    probs = np.take_along_axis(np.asarray(jax.nn.softmax(x, axis=-1)), order, axis=-1)
    mass_before = np.cumsum(probs, axis=-1) - probs
    chosen = draws(x, top_p=0.5)
    for row in range(ROWS):
        nucleus = set(order[row, mass_before[row] < 0.5].tolist())
        assert set(chosen[:, row].tolist()) <= nucleus
        assert len(set(chosen[:, row].tolist())) > 1 or len(nucleus) == 1


def test_penalties_push_down_exactly_the_tokens_they_cover() -> None:
    x = jnp.asarray(np.tile(np.linspace(3, 1, V, dtype=np.float32), (ROWS, 1)))  # token 0 best, then 1, ...
    seen = np.zeros((ROWS, V), bool)
    seen[:, 0] = True
    counts = np.zeros((ROWS, V), np.int32)
    counts[:, 0] = 1
    greedy = {"temperature": 0.0}
    assert (np.asarray(sample(x, inputs(**greedy, seen=seen, repetition_penalty=1.0)).token) == 0).all()
    assert (np.asarray(sample(x, inputs(**greedy, seen=seen, repetition_penalty=2.0)).token) == 1).all()
    assert (np.asarray(sample(x, inputs(**greedy, output_counts=counts, presence_penalty=1.0)).token) == 1).all()
    assert (np.asarray(sample(x, inputs(**greedy, output_counts=counts, frequency_penalty=1.0)).token) == 1).all()
    # a penalty on unseen tokens changes nothing
    assert (np.asarray(sample(x, inputs(**greedy, presence_penalty=5.0, frequency_penalty=5.0)).token) == 0).all()


def test_a_row_is_penalised_and_masked_alike_with_or_without_such_rows_beside_it() -> None:
    """The sampler skips the penalty and grammar passes when no row of the step needs them."""
    x = jnp.asarray(np.tile(np.linspace(3, 1, V, dtype=np.float32), (ROWS, 1)))  # token 0 best, then 1, ...
    seen = np.zeros((ROWS, V), bool)
    seen[:, 0] = True
    allowed = np.full((ROWS, V // 32), -1, np.int32)
    allowed[1] = [0, 0b100]  # row 1 may say token 34 only
    special = {"temperature": 0.0, "seen": seen, "repetition_penalty": [2.0, 1.0, 1.0, 1.0], "allowed": allowed}
    together = np.asarray(sample(x, inputs(**special)).token)
    assert together.tolist() == [1, 34, 0, 0]
    plain = np.asarray(sample(x, inputs(temperature=0.0, seen=seen)).token)
    assert plain.tolist() == [0, 0, 0, 0]


def test_seeded_rows_are_reproducible_alone_or_batched() -> None:
    x = logits()
    batched = draws(x, 30, seed=[5, 6, 7, 8])
    alone = np.stack([np.asarray(sample(x[2:3], inputs(1, seed=7, counter=c)).token) for c in range(30)])
    assert (batched[:, 2] == alone[:, 0]).all()
    assert (draws(x, 30, seed=[5, 6, 7, 8]) == batched).all()
    assert len(set(batched[:, 0].tolist())) > 1  # successive counters draw afresh


def test_bitmask_is_respected() -> None:
    x = logits()
    allowed = np.zeros((ROWS, V // 32), np.int32)
    allowed[:, 1] = 0b1010  # tokens 33 and 35
    assert set(draws(x, 50, allowed=allowed).ravel().tolist()) <= {33, 35}
    mask = np.asarray(allowed_mask(jnp.asarray(np.full((1, 2), -1, np.int32)), 50))
    assert mask.shape == (1, 50) and mask.all()


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.5])
def test_logprobs_are_log_softmax_of_the_raw_logits(temperature: float) -> None:
    x = logits()
    sampled = sample(x, inputs(temperature=temperature, presence_penalty=1.0))
    expected = np.asarray(jax.nn.log_softmax(x, axis=-1))
    tokens = np.asarray(sampled.token)
    np.testing.assert_allclose(np.asarray(sampled.logprob), expected[np.arange(ROWS), tokens], rtol=1e-5, atol=1e-5)
    top_ids = np.asarray(sampled.top_ids)
    assert (top_ids[:, 0] == np.argmax(expected, axis=-1)).all()
    np.testing.assert_allclose(
        np.asarray(sampled.top_logprobs), np.take_along_axis(expected, top_ids, axis=-1), atol=1e-5
    )


def test_rows_without_logprobs_choose_alike_and_skip_them() -> None:
    x = logits()
    asked, skipped = sample(x, inputs(temperature=0.0)), sample(x, inputs(temperature=0.0, logprobs=False))
    assert (np.asarray(asked.token) == np.asarray(skipped.token)).all()
    assert not np.asarray(skipped.top_logprobs).any()


def is_plain(s: SamplerInputs) -> bool:
    args = (s.temperature, s.repetition_penalty, s.presence_penalty, s.frequency_penalty, s.allowed, s.logprobs)
    return bool(plain(*args))


def test_greedy_rows_with_a_bias_take_the_short_path_to_the_same_tokens() -> None:
    """A step whose rows are all plain (greedy, nothing but a logit bias) skips `sample`: `greedy`
    must choose what `sample` chooses, bias included; any other setting on any row is not plain."""
    x = logits()
    best = np.argmax(np.asarray(x), axis=-1)
    bias = {"bias_ids": np.stack([best, best + 1, best + 2], axis=-1) % V, "bias_values": [-100.0, 3.0, 0.0]}
    settled = inputs(temperature=0.0, logprobs=False, **bias)
    assert is_plain(settled)
    short = greedy(x, jnp.asarray(settled.bias_ids), jnp.asarray(settled.bias_values), jnp.asarray(settled.scored_ids))
    np.testing.assert_array_equal(np.asarray(short.token), np.asarray(sample(x, settled).token))
    assert (np.asarray(short.token) != best).all()  # the bias counted
    assert not np.asarray(short.logprob).any() and not np.asarray(short.top_ids).any()
    for other in (
        {"temperature": [0.0, 0.0, 0.0, 0.7]},
        {"repetition_penalty": [1.0, 1.2, 1.0, 1.0]},
        {"presence_penalty": [0.0, 0.0, 0.5, 0.0]},
        {"frequency_penalty": [0.3, 0.0, 0.0, 0.0]},
        {"logprobs": [False, True, False, False]},
        {"allowed": np.array([[-1, -1], [-1, -1], [-1, 0], [-1, -1]], np.int32)},
    ):
        assert not is_plain(inputs(**{"temperature": 0.0, "logprobs": False, **other}))


@pytest.mark.parametrize("vocab", [5, 128, 300, 49152])
def test_first_best_is_argmax_ties_and_banned_rows_included(vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    logits = rng.standard_normal((6, vocab)).astype(np.float32)
    logits[1, :] = 0.5  # every token tied: the first
    logits[2, :] = -np.inf  # every token banned: the first, as argmax answers
    logits[3, vocab // 2] = logits[3, vocab - 1] = 9.0  # two equal bests in different chunks
    logits[4, :3] = 7.0  # equal bests in one chunk
    got = np.asarray(sampling.first_best(jnp.asarray(logits)))
    np.testing.assert_array_equal(got, np.argmax(logits, axis=-1))


def test_scored_ids_report_their_logprobs_however_unlikely() -> None:
    """A row's scored ids get their log_softmax values in the row's order (a decision's labels),
    the least likely token of the vocabulary included; without logprobs they are zeros."""
    x = logits()
    expected = np.asarray(jax.nn.log_softmax(x, axis=-1))
    unlikely = np.argsort(expected, axis=-1)[:, :2]  # each row's two least likely tokens
    ids = np.full((ROWS, 4), -1, np.int32)
    ids[:, 0], ids[:, 1], ids[:, 2] = unlikely[:, 0], 7, unlikely[:, 1]
    scored = np.asarray(sample(x, inputs(scored_ids=ids)).scored)
    np.testing.assert_allclose(scored[:, :3], np.take_along_axis(expected, ids[:, :3], axis=-1), atol=1e-5)
    silent = sample(x, inputs(scored_ids=ids, logprobs=False))
    assert not np.asarray(silent.scored).any()
