"""Whisper's rules on the logits of a decode step, on the device over a batch of lanes, then the
draw (CTranslate2's order, which faster-whisper decodes with):

1. the suppressed tokens (non-speech symbols and the special tokens) are banned at every step,
   and at a window's first step also the blank and the end of text (`begin_suppress`);
2. the timestamp rules: `<|notimestamps|>` is banned; the first token is a timestamp no later
   than MAX_INITIAL_TIMESTAMP; timestamps come in pairs (after a lone timestamp, a timestamp or
   the end of text; after a pair, text); they never decrease; and where the timestamps' total
   probability beats every text token's, a timestamp is forced.
3. the draw: the likeliest token at temperature 0, else a sample at the lane's temperature; its
   log-probability is read from the ruled logits at temperature 1, as the average log-probability
   thresholds expect.
"""

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

NEG_INF = -jnp.inf


@dataclass(frozen=True)
class RuleTokens:
    """The token ids the rules name (static for a compiled program)."""

    vocab_size: int
    eot: int
    no_timestamps: int
    timestamp_begin: int
    suppress: tuple[int, ...]
    begin_suppress: tuple[int, ...]
    max_initial_timestamp: int  # timestamp steps from timestamp_begin allowed first

    def banned(self) -> np.ndarray:
        """bool[vocab]: the tokens banned at every step."""
        mask = np.zeros(self.vocab_size, bool)
        mask[list(self.suppress)] = True
        mask[self.no_timestamps] = True
        return mask

    def banned_first(self) -> np.ndarray:
        """bool[vocab]: the tokens banned at a window's first step besides `banned`: the blank and
        the end of text, every text token, and the timestamps after the latest initial one."""
        mask = np.zeros(self.vocab_size, bool)
        mask[list(self.begin_suppress)] = True
        mask[: self.timestamp_begin] = True
        mask[self.timestamp_begin + self.max_initial_timestamp + 1 :] = True
        return mask


class LaneHistory(NamedTuple):
    """What the rules read of each lane's drawn tokens, int32[lanes] each: how many it drew in this
    window, its last two tokens (-1 where there are none) and its last timestamp token (-1: none)."""

    drawn: jax.Array | np.ndarray
    last: jax.Array | np.ndarray
    penultimate: jax.Array | np.ndarray
    last_timestamp: jax.Array | np.ndarray


def apply_rules(logits: jax.Array, history: LaneHistory, tokens: RuleTokens) -> jax.Array:
    """logits float32[lanes, vocab] → the ruled logits (banned tokens at -inf)."""
    ids = jnp.arange(tokens.vocab_size)
    is_timestamp = ids >= tokens.timestamp_begin
    first = (history.drawn == 0)[:, None]
    banned = jnp.asarray(tokens.banned())[None, :] | (first & jnp.asarray(tokens.banned_first())[None, :])
    last_is_timestamp = (history.last >= tokens.timestamp_begin)[:, None]
    # A window's first drawn token counts as its own penultimate (CTranslate2's rule).
    penultimate_is_timestamp = ((history.drawn < 2) | (history.penultimate >= tokens.timestamp_begin))[:, None]
    later = ~first
    after_pair = later & last_is_timestamp & penultimate_is_timestamp
    after_lone = later & last_is_timestamp & ~penultimate_is_timestamp
    banned |= after_pair & is_timestamp[None, :]
    banned |= after_lone & (ids < tokens.eot)[None, :]
    decreasing = is_timestamp[None, :] & (ids[None, :] < history.last_timestamp[:, None])
    banned |= later & decreasing
    ruled = jnp.where(banned, NEG_INF, logits)
    # Force a timestamp where their summed probability beats the likeliest text token's.
    logprobs = jax.nn.log_softmax(ruled, axis=-1)
    timestamp_mass = jax.nn.logsumexp(jnp.where(is_timestamp[None, :], logprobs, NEG_INF), axis=-1)
    best_text = jnp.max(jnp.where(is_timestamp[None, :], NEG_INF, logprobs), axis=-1)
    checked = (later & ~after_pair)[:, 0]
    force = checked & (timestamp_mass > best_text)
    return jnp.where(force[:, None] & ~is_timestamp[None, :], NEG_INF, ruled)


def draw(ruled: jax.Array, temperature: jax.Array, keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The drawn token int32[lanes] and its log-probability float32[lanes]: argmax where the lane's
    temperature is 0, else a sample at it (`keys`: one PRNG key a lane). A sample inverts the
    cumulative distribution at one uniform number a lane (random numbers a token, as a Gumbel draw
    takes, cost more than the step's model on the CPU); a banned token's empty interval is never hit."""
    logprobs = jax.nn.log_softmax(ruled, axis=-1)
    greedy = jnp.argmax(ruled, axis=-1)
    scale = jnp.where(temperature > 0, temperature, 1.0)[:, None]
    cumulative = jnp.cumsum(jax.nn.softmax(ruled / scale, axis=-1), axis=-1)
    uniform = jax.vmap(jax.random.uniform)(keys) * cumulative[:, -1]
    sampled = jax.vmap(lambda c, u: jnp.searchsorted(c, u, side="right"))(cumulative, uniform)
    sampled = jnp.minimum(sampled, ruled.shape[-1] - 1)
    token = jnp.where(temperature > 0, sampled, greedy).astype(jnp.int32)
    return token, jnp.take_along_axis(logprobs, token[:, None], axis=-1)[:, 0]
