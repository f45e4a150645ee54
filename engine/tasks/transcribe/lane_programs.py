"""The transcribe task's device programs over a Whisper model, on the CPU device, each compiled
for every shape before serving:

- `admit`: a batch of windows' log-mel (1, 2, 4… up to the encoder batch) through the encoder,
  each one's cross-attention keys and values written into its lane;
- `prefill`: one lane's prompt (padded to a length bucket) into its self-attention cache, the
  no-speech probability and the language log-probabilities at its start-of-transcript position,
  and its first token drawn under the rules;
- `step`: one token of each of the first lanes (1, 2, 4… up to every lane: the fewest that hold
  the busy ones, which are the lowest lanes free when admitted; idle ones among them too, their
  entries rewritten before use), ruled and drawn on the device; only the drawn ids and their
  log-probabilities come back. A step's cost is mostly reading each lane's cross-attention keys
  and values, so a lone request does not pay for seven idle lanes;
- `align`: one lane's window text decoded afresh (sot sequence, no-timestamps, text, end of text)
  for the alignment heads' cross-attention and each text token's probability.

The lanes' caches live in `LaneState` (the model's cache trees with the lanes as every array's
first axis), donated to each program and replaced by its result.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from engine.model.families.whisper import CrossKV, SelfKV, WhisperConfig, cross_kv, decode, encode, init_self_kv
from engine.tasks.transcribe.logit_rules import LaneHistory, RuleTokens, apply_rules, draw
from engine.tasks.transcribe.segmenting import WINDOW_FRAMES

LANE_AXIS = 0  # of every array of the caches (a layer's [lanes, heads, positions, head_dim])
PREFILL_LENGTHS = (16, 64, 256)  # compiled prompt lengths; a prompt holds at most ~half the text context
ALIGN_LENGTHS = (64, 256)  # compiled lengths of a window's text for the alignment pass


class LaneState(NamedTuple):
    self_kv: SelfKV
    cross: CrossKV


class Drawn(NamedTuple):
    """A prefill's results for its lane (device arrays until read)."""

    token: jax.Array
    logprob: jax.Array
    no_speech_prob: jax.Array
    language_logprobs: jax.Array  # over the model's language tokens (one dummy entry for .en models)


@dataclass(frozen=True)
class Programs:
    """What the programs are compiled for: the model's shape, its rules' tokens, the lanes."""

    config: WhisperConfig
    rules: RuleTokens
    no_speech: int
    language_ids: tuple[int, ...]
    lanes: int

    def empty_state(self, params: Any, device: jax.Device) -> LaneState:
        c = self.config
        features = jax.ShapeDtypeStruct((1, c.n_audio_ctx, c.d_model), jnp.float32)
        cross = jax.eval_shape(lambda p, f: cross_kv(p, c, f), params, features)
        with jax.default_device(device):
            self_kv = init_self_kv(c, self.lanes, c.n_text_ctx)
            lanes = jax.tree.map(lambda a: jnp.zeros((self.lanes, *a.shape[1:]), a.dtype), cross)
            return LaneState(self_kv, lanes)

    def admit(self, params: Any, state: LaneState, lanes: jax.Array, mel: jax.Array) -> LaneState:
        """mel float32[B, n_mels, WINDOW_FRAMES] into lanes int32[B] (an index >= lanes: padding)."""
        kv = cross_kv(params, self.config, encode(params, self.config, mel))
        cross = jax.tree.map(lambda a, b: a.at[lanes].set(b, mode="drop"), state.cross, kv)
        return LaneState(state.self_kv, cross)

    def prefill(
        self,
        params: Any,
        state: LaneState,
        lane: jax.Array,
        tokens: jax.Array,
        length: jax.Array,
        sot_index: jax.Array,
        temperature: jax.Array,
        seed: jax.Array,
    ) -> tuple[LaneState, Drawn]:
        """tokens int32[T] (the prompt, `length` of them, then padding) at positions 0.. of `lane`."""
        self_kv = jax.tree.map(lambda a: _lane(a, lane), state.self_kv)
        cross = jax.tree.map(lambda a: _lane(a, lane), state.cross)
        positions = jnp.arange(tokens.shape[0], dtype=jnp.int32)[None]
        logits, self_kv, _ = decode(params, self.config, tokens[None], positions, self_kv, cross)
        written = jax.tree.map(lambda a, b: _put_lane(a, b, lane), state.self_kv, self_kv)
        at_sot = logits[0, sot_index]
        no_speech_prob = jax.nn.softmax(at_sot)[self.no_speech]
        language_logprobs = jax.nn.log_softmax(at_sot[jnp.asarray(self.language_ids)])
        none = jnp.full((1,), -1, jnp.int32)
        history = LaneHistory(jnp.zeros((1,), jnp.int32), none, none, none)
        ruled = apply_rules(logits[:, length - 1], history, self.rules)
        token, logprob = draw(ruled, temperature[None], _keys(seed[None], history.drawn))
        return LaneState(written, state.cross), Drawn(token[0], logprob[0], no_speech_prob, language_logprobs)

    def step(
        self,
        params: Any,
        state: LaneState,
        tokens: jax.Array,
        positions: jax.Array,
        history: LaneHistory,
        temperature: jax.Array,
        seeds: jax.Array,
    ) -> tuple[LaneState, jax.Array, jax.Array]:
        """The first k lanes' next tokens: tokens, positions int32[k] (each lane's last drawn token
        and where it goes) → (state, drawn int32[k], their log-probabilities float32[k])."""
        k = tokens.shape[0]
        self_kv = jax.tree.map(lambda a: a[:k], state.self_kv)
        cross = jax.tree.map(lambda a: a[:k], state.cross)
        logits, self_kv, _ = decode(params, self.config, tokens[:, None], positions[:, None], self_kv, cross)
        written = jax.tree.map(
            lambda a, b: jax.lax.dynamic_update_slice_in_dim(a, b, 0, LANE_AXIS), state.self_kv, self_kv
        )
        ruled = apply_rules(logits[:, 0], history, self.rules)
        token, logprob = draw(ruled, temperature, _keys(seeds, history.drawn))
        return LaneState(written, state.cross), token, logprob

    def align(self, params: Any, state: LaneState, lane: jax.Array, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        """tokens int32[A] (sot sequence, no-timestamps, text, end of text, padding) over `lane`'s
        audio → (the probability of each position's next token among the text tokens float32[A],
        the alignment heads' weights float32[heads, A, n_audio_ctx])."""
        cross = jax.tree.map(lambda a: _lane(a, lane), state.cross)
        positions = jnp.arange(tokens.shape[0], dtype=jnp.int32)[None]
        fresh = init_self_kv(self.config, 1, tokens.shape[0])
        logits, _, weights = decode(params, self.config, tokens[None], positions, fresh, cross, alignment=True)
        assert weights is not None
        probs = jax.nn.softmax(logits[0, :, : self.rules.eot], axis=-1)
        following = jnp.clip(jnp.roll(tokens, -1), 0, self.rules.eot - 1)
        return jnp.take_along_axis(probs, following[:, None], axis=-1)[:, 0], weights[0]


def _lane(array: jax.Array, lane: jax.Array) -> jax.Array:
    return jax.lax.dynamic_slice_in_dim(array, lane, 1, axis=LANE_AXIS)


def _put_lane(array: jax.Array, update: jax.Array, lane: jax.Array) -> jax.Array:
    return jax.lax.dynamic_update_slice_in_dim(array, update, lane, axis=LANE_AXIS)


def _keys(seeds: jax.Array, counters: jax.Array | np.ndarray) -> jax.Array:
    """One PRNG key a lane: its attempt's seed, folded with how many tokens it drew."""
    return jax.vmap(lambda seed, counter: jax.random.fold_in(jax.random.key(seed), counter))(seeds, counters)


def bucket(length: int, buckets: tuple[int, ...]) -> int:
    """The smallest compiled length that holds `length`."""
    for size in buckets:
        if size >= length:
            return size
    raise ValueError(f"{length} is over the longest compiled length {buckets[-1]}")


def encoder_batches(most: int) -> tuple[int, ...]:
    """Compiled encoder batch sizes: powers of two up to `most`, and `most` itself."""
    sizes = [1]
    while sizes[-1] * 2 <= most:
        sizes.append(sizes[-1] * 2)
    if sizes[-1] != most:
        sizes.append(most)
    return tuple(sizes)


def window_mel(mel: np.ndarray, seek: int, frames: int) -> np.ndarray:
    """The window of `frames` mel frames from `seek`, padded with zeros to WINDOW_FRAMES (as
    faster-whisper pads its features)."""
    window = np.zeros((mel.shape[0], WINDOW_FRAMES), np.float32)
    window[:, :frames] = mel[:, seek : seek + frames]
    return window
