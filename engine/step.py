"""The engine's compiled device functions: prefill chunk, decode step, and two small helpers.

All take and return the device state (KV pages, per-lane penalty state) donated, so it is updated
in place. Shapes are padded to buckets (rows, tokens, block-table width) chosen by the engine;
every bucket is compiled once at start-up. Block tables carry one more column than any row uses,
always the null page: padded prompt tokens are placed there, so their keys and values never
land in a real page.
"""

from dataclasses import dataclass
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from engine.layers import PagedLayerCache
from engine.sampling import Sampled, SamplerInputs, sample

Array = jax.Array
KVPages = tuple[PagedLayerCache, ...]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class LaneState:
    """Penalty state per lane (one extra lane absorbs padding rows)."""

    seen: Array  # bool[lanes + 1, V]: tokens of the prompt or output
    output_counts: Array  # i32[lanes + 1, V]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class RowParams:
    """SamplerInputs without the penalty state, which lives on the device in LaneState.

    The engine keeps one host table of these per lane and passes the decoding rows' slice to each
    step; inside the jitted step the fields are tracers.
    """

    temperature: np.ndarray
    top_k: np.ndarray
    top_p: np.ndarray
    min_p: np.ndarray
    repetition_penalty: np.ndarray
    presence_penalty: np.ndarray
    frequency_penalty: np.ndarray
    bias_ids: np.ndarray
    bias_values: np.ndarray
    allowed: np.ndarray
    seed: np.ndarray
    counter: np.ndarray


class StepFunctions:
    """The jitted functions for one model's forward pass (one set per engine)."""

    def __init__(self, model: nn.Module) -> None:
        def prefill(params: Any, kv: KVPages, tokens: Array, positions: Array, block_tables: Array) -> KVPages:
            logits_at = jnp.zeros(tokens.shape[0], jnp.int32)  # prefill needs no logits; take the cheapest
            _, written = model.apply({"params": params}, tokens, positions, kv, block_tables, logits_at)
            return cast(KVPages, written)

        def decode(
            params: Any,
            kv: KVPages,
            lanes: LaneState,
            tokens: Array,
            positions: Array,
            block_tables: Array,
            lane_ids: Array,
            rows: RowParams,
        ) -> tuple[KVPages, LaneState, Sampled]:
            logits_at = jnp.zeros(tokens.shape[0], jnp.int32)
            logits, kv = cast(
                tuple[Array, KVPages],
                model.apply({"params": params}, tokens[:, None], positions[:, None], kv, block_tables, logits_at),
            )
            inputs = SamplerInputs(**vars(rows), seen=lanes.seen[lane_ids], output_counts=lanes.output_counts[lane_ids])
            sampled = sample(logits[:, 0], inputs)
            lanes = LaneState(
                lanes.seen.at[lane_ids, sampled.token].set(True),
                lanes.output_counts.at[lane_ids, sampled.token].add(1),
            )
            return kv, lanes, sampled

        def reset_lane(lanes: LaneState, lane: Array, prompt: Array, output: Array) -> LaneState:
            """Penalty state of a row from its tokens, padded with -1 (dropped)."""
            vocab = lanes.seen.shape[1]
            prompt = jnp.where(prompt < 0, vocab, prompt)
            output = jnp.where(output < 0, vocab, output)
            seen = lanes.seen.at[lane].set(False).at[lane, prompt].set(True, mode="drop")
            seen = seen.at[lane, output].set(True, mode="drop")
            counts = lanes.output_counts.at[lane].set(0).at[lane, output].add(1, mode="drop")
            return LaneState(seen, counts)

        def copy_page(kv: KVPages, source: Array, target: Array) -> KVPages:
            return tuple(PagedLayerCache(c.k.at[target].set(c.k[source]), c.v.at[target].set(c.v[source])) for c in kv)

        self.prefill = jax.jit(prefill, donate_argnums=(1,))
        self.decode = jax.jit(decode, donate_argnums=(1, 2))
        self.reset_lane = jax.jit(reset_lane, donate_argnums=(0,))
        self.copy_page = jax.jit(copy_page, donate_argnums=(0,))
