"""Device-side sampling: one pure jitted function picks every row's next token from its logits.

Per-row parameters arrive as arrays (`SamplerInputs`), so rows with different settings share one
compiled step. Order, as in vLLM: repetition penalty (prompt + output tokens), presence/frequency
penalties (output tokens), logit bias, the allowed-token bitmask; then greedy rows take the argmax,
the others divide by the temperature, filter by top-k, top-p and min-p, and draw with their own
PRNG key. Reported logprobs are log_softmax of the raw model logits (no temperature, no penalties).
A step whose rows are all `plain` (greedy, at most a logit bias) can take `greedy` instead: the
same tokens in one pass, without the penalty state.
"""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from engine.api import MAX_TOP_LOGPROBS, penalised

Array = jax.Array
_BANNED = -jnp.inf


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SamplerInputs:
    """Per-row sampling parameters; every array's leading axis is the row (B)."""

    temperature: Array  # f32[B], 0 = greedy
    top_k: Array  # i32[B], 0 = off
    top_p: Array  # f32[B]
    min_p: Array  # f32[B]
    repetition_penalty: Array  # f32[B]
    presence_penalty: Array  # f32[B]
    frequency_penalty: Array  # f32[B]
    bias_ids: Array  # i32[B, L] token ids of logit_bias entries (unused slots: any id, bias 0)
    bias_values: Array  # f32[B, L]
    allowed: Array  # i32[B, ceil(V/32)] bitmask; all bits set when unconstrained
    seed: Array  # u32[B]
    counter: Array  # i32[B] tokens this row has drawn so far: folds into the key, so draws never repeat
    logprobs: Array  # bool[B] the row reports logprobs
    scored_ids: Array  # i32[B, MAX_SCORED_IDS] ids whose logprobs the row reports (-1: none)
    seen: Array  # bool[B, V] tokens in the prompt or output (repetition penalty)
    output_counts: Array  # i32[B, V] occurrences in the output (presence/frequency penalties)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Sampled:
    token: Array  # i32[B]
    logprob: Array  # f32[B] of the chosen token
    top_ids: Array  # i32[B, MAX_TOP_LOGPROBS] best first
    top_logprobs: Array  # f32[B, MAX_TOP_LOGPROBS]
    scored: Array  # f32[B, MAX_SCORED_IDS] the logprobs of the row's scored_ids


def allowed_mask(bitmask: Array, vocab_size: int) -> Array:
    """bool[B, V] from the int32[B, ceil(V/32)] bitmask (bit i of word w is token 32*w + i)."""
    bits = (bitmask[:, :, None] >> jnp.arange(32, dtype=jnp.int32)) & 1
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].astype(bool)


def _adjusted(logits: Array, s: SamplerInputs) -> Array:
    # Each pass below reads or writes the whole [B, V] logits (and the penalties' [B, V] state): a
    # step whose rows set no penalty, or no grammar, skips that pass (a no-op there, bit for bit).
    any_penalised = jnp.any(penalised(s.repetition_penalty, s.presence_penalty, s.frequency_penalty))
    logits = jax.lax.cond(any_penalised, _penalties, lambda x, _: x, logits, s)
    logits = _biased(logits, s.bias_ids, s.bias_values)
    constrained = jnp.any(s.allowed != -1)
    return jax.lax.cond(constrained, _allowed_only, lambda x, _: x, logits, s.allowed)


def _biased(logits: Array, bias_ids: ArrayLike, bias_values: ArrayLike) -> Array:
    rows = jnp.arange(logits.shape[0])[:, None]
    return logits.at[rows, bias_ids].add(bias_values)


def _penalties(logits: Array, s: SamplerInputs) -> Array:
    rep = s.repetition_penalty[:, None]
    logits = jnp.where(s.seen, jnp.where(logits > 0, logits / rep, logits * rep), logits)
    counts = s.output_counts.astype(jnp.float32)
    return logits - s.frequency_penalty[:, None] * counts - s.presence_penalty[:, None] * (counts > 0)


def _allowed_only(logits: Array, allowed: Array) -> Array:
    return jnp.where(allowed_mask(allowed, logits.shape[1]), logits, _BANNED)


def _top_k_top_p(logits: Array, top_k: Array, top_p: Array) -> Array:
    """Bans tokens below each row's top-k and outside its top-p nucleus (one descending sort)."""
    ordered = -jnp.sort(-logits, axis=-1)
    vocab = logits.shape[1]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
    kth = jnp.take_along_axis(ordered, (k - 1)[:, None], axis=-1)
    ordered = jnp.where(ordered >= kth, ordered, _BANNED)
    probs = jax.nn.softmax(ordered, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    # The nucleus is the shortest prefix whose mass reaches top_p; its last member sets the cutoff.
    in_nucleus = mass_before < top_p[:, None]
    cutoff = jnp.min(jnp.where(in_nucleus, ordered, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits >= jnp.maximum(cutoff, kth), logits, _BANNED)


# Logits per chunk of `first_best`'s first pass.
_ARGMAX_CHUNK = 128


def first_best(logits: Array) -> Array:
    """Each row's index of its largest logit, the first of equals, as `jnp.argmax` picks it: the
    largest of each chunk of 128, the first chunk holding the row's largest, then the first index
    of it in that chunk. XLA's CPU argmax is a reduce over (value, index) pairs that does not
    vectorize: over 64 rows of a 49,152-token vocabulary it took 7.0 ms on a Zen 4 core, this 0.31
    ms (one row: 0.23 and 0.04 ms)."""
    rows, vocab = logits.shape
    padding = -vocab % _ARGMAX_CHUNK
    if padding:
        logits = jnp.pad(logits, ((0, 0), (0, padding)), constant_values=-jnp.inf)
    chunks = logits.reshape(rows, -1, _ARGMAX_CHUNK)
    best_chunk = jnp.argmax(jnp.max(chunks, axis=-1), axis=-1)
    chunk = jnp.take_along_axis(chunks, best_chunk[:, None, None], axis=1)[:, 0]
    return (best_chunk * _ARGMAX_CHUNK + jnp.argmax(chunk, axis=-1)).astype(jnp.int32)


def _draw(logits: Array, s: SamplerInputs) -> Array:
    greedy = s.temperature <= 0
    best = first_best(logits)
    # Filtering and drawing take several passes and PRNG bits over the vocabulary per row: a batch
    # of greedy rows skips them.
    return jax.lax.cond(jnp.all(greedy), lambda: best, lambda: jnp.where(greedy, best, _drawn(logits, s)))


def _drawn(logits: Array, s: SamplerInputs) -> Array:
    """Every row's draw at its temperature, after top-k, top-p and min-p."""
    greedy = s.temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, s.temperature)[:, None]
    needs_sort = jnp.any(((s.top_k > 0) | (s.top_p < 1.0)) & ~greedy)
    scaled = jax.lax.cond(needs_sort, _top_k_top_p, lambda x, _k, _p: x, scaled, s.top_k, s.top_p)
    probs = jax.nn.softmax(scaled, axis=-1)
    floor = s.min_p[:, None] * jnp.max(probs, axis=-1, keepdims=True)
    kept = jnp.where(probs >= floor, probs, 0.0)

    def row_uniform(seed: Array, counter: Array) -> Array:
        key = jax.random.fold_in(jax.random.key(seed), counter)
        return jax.random.uniform(key, minval=jnp.finfo(jnp.float32).tiny)

    # Inverse CDF: one uniform draw per row, much cheaper than a Gumbel draw per token of the
    # vocabulary. The first index whose cumulative mass reaches u·total is never a token of zero
    # probability, since u > 0.
    cumulative = jnp.cumsum(kept, axis=-1)
    u = jax.vmap(row_uniform)(s.seed, s.counter) * cumulative[:, -1]
    return jnp.minimum(jnp.sum(cumulative < u[:, None], axis=-1), logits.shape[1] - 1).astype(jnp.int32)


def _logprobs(logits: Array, token: Array, scored_ids: Array) -> tuple[Array, Array, Array, Array]:
    logprobs = jax.nn.log_softmax(logits, axis=-1)
    chosen = jnp.take_along_axis(logprobs, token[:, None], axis=-1)[:, 0]
    top_logprobs, top_ids = jax.lax.top_k(logprobs, min(MAX_TOP_LOGPROBS, logits.shape[1]))
    scored = jnp.take_along_axis(logprobs, jnp.maximum(scored_ids, 0), axis=-1)
    return chosen, top_ids.astype(jnp.int32), top_logprobs, scored


def _no_logprobs(logits: Array, token: Array, scored_ids: ArrayLike) -> tuple[Array, Array, Array, Array]:
    rows, top = logits.shape[0], min(MAX_TOP_LOGPROBS, logits.shape[1])
    return jnp.zeros(rows), jnp.zeros((rows, top), jnp.int32), jnp.zeros((rows, top)), jnp.zeros(jnp.shape(scored_ids))


def plain(
    temperature: ArrayLike,
    repetition_penalty: ArrayLike,
    presence_penalty: ArrayLike,
    frequency_penalty: ArrayLike,
    allowed: ArrayLike,
    logprobs: ArrayLike,
) -> Array:
    """Whether every row is greedy with at most a logit bias: no penalty, grammar or logprobs."""
    neutral = ~penalised(jnp.asarray(repetition_penalty), jnp.asarray(presence_penalty), jnp.asarray(frequency_penalty))
    return jnp.all((jnp.asarray(temperature) <= 0) & neutral & ~jnp.asarray(logprobs)) & jnp.all(
        jnp.asarray(allowed) == -1
    )


def greedy(logits: Array, bias_ids: ArrayLike, bias_values: ArrayLike, scored_ids: ArrayLike) -> Sampled:
    """What `sample` returns for rows that are all `plain`, in one pass over the logits and without
    the penalty state: a step of greedy rows need not gather that state ([B, V] twice)."""
    token = first_best(_biased(logits, bias_ids, bias_values))
    return Sampled(token, *_no_logprobs(logits, token, scored_ids))


@jax.jit
def sample(logits: Array, inputs: SamplerInputs) -> Sampled:
    """Chooses one token per row from float32 logits [B, V]; logprobs are zeros unless a row asks."""
    token = _draw(_adjusted(logits, inputs), inputs)
    # A log_softmax and a top-k over the vocabulary per row, so only when some row reports them.
    reported = jax.lax.cond(jnp.any(inputs.logprobs), _logprobs, _no_logprobs, logits, token, inputs.scored_ids)
    return Sampled(token, *reported)
