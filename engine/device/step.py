"""The model's compiled steps: a prefill chunk (scored or not), a decode step, a decode step
that checks drafts (`verify`) and a decode burst (several decode steps in one call); with them,
compiled apart, the first tokens' draw and the reset of a lane's penalty state
(engine/device/lane_sampling.py).

Prefill and decode only read the KV pages and return the step's new keys and values (`Written`);
the pool stores them (engine/device/kv_pool.py). Per-lane penalty state is donated and returned
by the function that changes it. Shapes are padded to buckets (rows, tokens, block-table width)
chosen by the runner (engine/device/compiled_shapes.py); every bucket is compiled once at
start-up. Block tables carry one more column than any row uses, always the null page: padded
prompt tokens are placed there, so their keys and values never land in a real page.

A burst runs `burst_steps` decode steps in a loop traced once (`jax.lax.scan`), each sampling
its rows' tokens on the device as a decode step would and feeding them to the next. The pool is
only read inside the loop (writing it there made XLA copy the whole pool each turn): each step's
keys and values go into a small side buffer in the loop's carry, which attention reads beside the
pool, and which comes back after the loop as the burst's `Written`, stored once.

With LoRA adapter slots (engine/device/adapter_slots.py), prefill, decode and verify take the
slots' stack and each row's slot. Without slots the stack is None and the steps are the plain
model's.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.tree_util import PyTreeDef

from engine.api import MAX_TOP_LOGPROBS
from engine.device.executables import own_jit
from engine.device.kv_pool import KVPages, Written, written
from engine.device.lane_sampling import (
    LaneState,
    RowParams,
    chosen,
    counted,
    first_tokens,
    of_lanes,
    reset_lane,
    sampled_rows,
)
from engine.device.runner_api import NULL_PAGE
from engine.device.sampling import Sampled
from engine.model.layers.kv_cache import BurstSide, NewKV, value_dtype
from engine.model.layers.lora import LoraBatch, LoraStack

Array = jax.Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PromptScores:
    """A scored prefill chunk's numbers on the device (engine/device/runner_api.py's, there on the host)."""

    logprobs: Array  # f32[T]
    ranks: Array  # i32[T]
    top_ids: Array  # i32[T, MAX_TOP_LOGPROBS]
    top_logprobs: Array  # f32[T, MAX_TOP_LOGPROBS]


class StepFunctions:
    """The jitted functions for one model's forward pass (one set per engine).

    They take the model's parameters as the flat list of the tree's leaves (`params_tree` rebuilds
    the tree inside): a call's dispatch compares its arguments' tree with the compiled one's, which
    for a tree of nested dicts with hundreds of leaves is a cost every step pays."""

    def __init__(
        self, model: nn.Module, params_tree: PyTreeDef, page_size: int, prefill_rows: int, burst_steps: int = 0
    ) -> None:
        """`burst_steps`: the decode steps of a burst (0: no bursts)."""
        self._model, self._params_tree = model, params_tree
        self._page_size, self._prefill_rows, self.burst_steps = page_size, prefill_rows, burst_steps
        self.prefill = jax.jit(self._prefill)
        self.decode = jax.jit(self._decode, donate_argnums=(3,))
        self.verify = jax.jit(self._verify, donate_argnums=(3,))
        self.burst = jax.jit(self._burst, donate_argnums=(3,))
        self.first_tokens = own_jit(first_tokens, donate_argnums=(0,))
        self.reset_lane = own_jit(reset_lane, donate_argnums=(0,))

    def _forward(
        self,
        params: list[Array],
        lora: LoraStack | None,
        slots: Array | None,
        *inputs: Array | KVPages | None,
        draft_step: bool = False,
        media: Array | None = None,
        rope: Array | None = None,
        burst: BurstSide | None = None,
    ) -> tuple[Array, Any]:
        """The model's logits and new keys and values; `slots` [B]: each row's adapter slot in
        `lora` (None: the engine has no adapter slots)."""
        tree = jax.tree.unflatten(self._params_tree, params)
        rows = None if lora is None or slots is None else LoraBatch(lora, slots)
        return self._model.apply(
            {"params": tree},
            *inputs,
            draft_step=draft_step,
            lora=rows,
            media=media,
            rope_positions=rope,
            burst=burst,
        )

    def _prefill(
        self,
        params: list[Array],
        lora: LoraStack | None,
        kv: KVPages,
        tokens: Array,
        positions: Array,
        block_tables: Array,
        last: Array,
        slots: Array,
        targets: Array | None,
        media: Array | None = None,
        rope: Array | None = None,
    ) -> tuple[Written, Array, PromptScores | None]:
        """The chunks' keys and values, and each row's logits at its chunk index `last` [B] (on a
        prompt's final chunk, its last token: the first output token is sampled from them),
        padded to [prefill_rows, V] so that `first_tokens` sees one shape. A model that takes
        images gets `media` [B,T,D], its image tokens' embeddings, and `rope` [B,T,3], every
        token's M-RoPE position.

        With `targets` [1, T] (one chunk, scored: a different program, compiled for its own
        bucket), every position's logits go through the head and the chunk's `PromptScores` come
        back too; without, only the logits at `last` and no scores."""
        logits_at = last if targets is None else None  # None: every position's logits
        logits, new = self._forward(
            params, lora, slots, tokens, positions, kv, block_tables, logits_at, media=media, rope=rope
        )
        padded = jnp.zeros((self._prefill_rows, logits.shape[-1]), logits.dtype)
        stored = written(new, positions, block_tables, self._page_size)
        if targets is None:
            return stored, padded.at[: logits.shape[0]].set(logits[:, 0]), None
        return stored, padded.at[0].set(logits[0, last[0]]), _scores(logits[0], targets[0])

    def _decode(
        self,
        params: list[Array],
        lora: LoraStack | None,
        kv: KVPages,
        lanes: LaneState,
        tokens: Array,
        positions: Array,
        block_tables: Array,
        lane_ids: Array,
        tables: RowParams,
        slots: Array | None,
        rope_shifts: Array | None = None,
    ) -> tuple[Written, LaneState, Sampled]:
        """One token a row; a model that takes images turns each at its position plus its row's
        `rope_shifts` [B] (M-RoPE after a prompt with images)."""
        rows = of_lanes(tables, lane_ids)
        logits_at = jnp.zeros(tokens.shape[0], jnp.int32)
        rope = None if rope_shifts is None else (positions + rope_shifts)[:, None]
        logits, new = self._forward(
            params, lora, slots, tokens[:, None], positions[:, None], kv, block_tables, logits_at, rope=rope
        )
        lanes, sampled = sampled_rows(logits[:, 0], lanes, lane_ids, rows)
        return written(new, positions[:, None], block_tables, self._page_size), lanes, sampled

    def _burst(
        self,
        params: list[Array],
        lora: LoraStack | None,
        kv: KVPages,
        lanes: LaneState,
        tokens: Array,
        positions: Array,
        block_tables: Array,
        lane_ids: Array,
        tables: RowParams,
        slots: Array | None,
        budgets: Array,
        stops: Array,
        rope_shifts: Array | None = None,
    ) -> tuple[Written, LaneState, Sampled, Array, Array]:
        """`burst_steps` decode steps: each row's `tokens` [B] at `positions` [B], then the token
        each step draws at the position after, each step's draw that of a decode step there (the
        row's counter advanced by the step, its penalty state by each draw). A row stops taking
        tokens after one of its `stops` [B, S] (-1: none) or its `budgets` [B]-th token; its
        later steps still run, their keys and values go to the null page. Returns the draws
        [B*burst_steps], row-major, how many of each row's it takes [B], and the last step's
        draws [B] (a chained step's input)."""
        B, N = tokens.shape[0], self.burst_steps
        rows = of_lanes(tables, lane_ids)
        logits_at = jnp.zeros(B, jnp.int32)
        pool = kv[0].k
        side_shape = (len(kv), B, N, pool.shape[0], pool.shape[3])
        side = jnp.zeros(side_shape, value_dtype(pool))

        def step(carry: tuple[Array, Array, Array, LaneState, Array, Array], j: Array) -> tuple[Any, Sampled]:
            token, side_k, side_v, lanes, live, taken = carry
            position = positions + j
            rope = None if rope_shifts is None else (position + rope_shifts)[:, None]
            inputs = (token[:, None], position[:, None], kv, block_tables, logits_at)
            burst = BurstSide(side_k, side_v, j)
            logits, new = self._forward(params, lora, slots, *inputs, rope=rope, burst=burst)
            news = cast(tuple[NewKV, ...], new)
            side_k = side_k.at[:, :, j].set(jnp.stack([n.k[:, 0] for n in news]).astype(side_k.dtype))
            side_v = side_v.at[:, :, j].set(jnp.stack([n.v[:, 0] for n in news]).astype(side_v.dtype))
            at_step = dataclasses.replace(rows, counter=rows.counter + j)
            lanes, sampled = sampled_rows(logits[:, 0], lanes, lane_ids, at_step)
            taken = taken + live
            ends = jnp.any(sampled.token[:, None] == stops, axis=1) | (taken >= budgets)
            return (sampled.token, side_k, side_v, lanes, live & ~ends, taken), sampled

        live = budgets > 0
        carry = (tokens, side, side, lanes, live, jnp.zeros(B, jnp.int32))
        (last, side_k, side_v, lanes, _, taken), sampled = jax.lax.scan(step, carry, jnp.arange(N, dtype=jnp.int32))
        sampled = jax.tree.map(lambda drawn: jnp.swapaxes(drawn, 0, 1).reshape(B * N, *drawn.shape[2:]), sampled)
        at = positions[:, None] + jnp.arange(N, dtype=positions.dtype)
        stored = written(
            tuple(NewKV(k, v) for k, v in zip(side_k, side_v, strict=True)), at, block_tables, self._page_size
        )
        untaken = jnp.arange(N)[None, :] >= taken[:, None]
        stored = dataclasses.replace(stored, pages=jnp.where(untaken, NULL_PAGE, stored.pages))
        return stored, lanes, sampled, taken, last

    def _verify(
        self,
        params: list[Array],
        lora: LoraStack | None,
        kv: KVPages,
        lanes: LaneState,
        tokens: Array,
        positions: Array,
        block_tables: Array,
        lane_ids: Array,
        tables: RowParams,
        slots: Array | None,
        drafts: Array,
        rope_shifts: Array | None = None,
    ) -> tuple[Written, LaneState, Sampled, Array]:
        """A decode step whose rows bring drafts: tokens [B, T] are each row's input token, then
        its `drafts` [B] draft tokens, then padding. Every position draws as decode would there
        (the row's parameters, its counter advanced by the position's offset), so a row takes
        the draft tokens its own draws reproduce and the draw after them: the tokens a decode
        step at a time would have drawn, the same for greedy and seeded rows. Returns the draws
        [B*T], row-major, and how many of each row's draws it takes [B].

        Penalty state follows each row's first token only: a row with penalties brings no draft
        (its later draws would need the state after each guess)."""
        B, T = tokens.shape
        rows = of_lanes(tables, lane_ids)
        rope = None if rope_shifts is None else positions + rope_shifts[:, None]
        # logits_at None: every position's logits
        logits, new = self._forward(
            params, lora, slots, tokens, positions, kv, block_tables, None, draft_step=True, rope=rope
        )
        offsets = jnp.tile(jnp.arange(T, dtype=rows.counter.dtype), B)
        per_position = jax.tree.map(lambda value: jnp.repeat(value, T, axis=0), rows)
        per_position = dataclasses.replace(per_position, counter=per_position.counter + offsets)
        sampled = chosen(logits.reshape(B * T, -1), lanes, jnp.repeat(lane_ids, T), per_position)
        drawn = sampled.token.reshape(B, T)
        agrees = (drawn[:, :-1] == tokens[:, 1:]) & (jnp.arange(T - 1)[None, :] < drafts[:, None])
        taken = 1 + jnp.sum(jnp.cumprod(agrees.astype(jnp.int32), axis=1), axis=1)
        lanes = counted(lanes, lane_ids, drawn[:, 0])
        return written(new, positions, block_tables, self._page_size), lanes, sampled, taken


def _scores(logits: Array, targets: Array) -> PromptScores:
    """At each position of a chunk's logits [T, V]: the log-softmax's value at `targets` [T] (the
    token that follows in the prompt; -1: none), the target's rank (1: the likeliest) and the
    MAX_TOP_LOGPROBS best."""
    logprobs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    target = jnp.take_along_axis(logprobs, jnp.maximum(targets, 0)[:, None], axis=-1)[:, 0]
    top_logprobs, top_ids = jax.lax.top_k(logprobs, min(MAX_TOP_LOGPROBS, logprobs.shape[-1]))
    ranks = 1 + jnp.sum(logprobs > target[:, None], axis=-1, dtype=jnp.int32)
    return PromptScores(target, ranks, top_ids.astype(jnp.int32), top_logprobs)
