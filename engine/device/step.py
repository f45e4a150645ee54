"""The runner's compiled device functions: prefill chunk, first-token sampling, decode step, a
decode step that checks drafts (`verify`), page write, and helpers.

Prefill and decode only read the KV pages and return the step's new keys and values (`Written`);
`write` then stores them into the donated pool. Kept apart, XLA updates the pool in place; in one
function it copied the whole pool every step. Other state (per-lane penalty state) is donated and
returned by the function that changes it. Shapes are padded to buckets (rows, tokens, block-table
width) chosen by the runner (engine/device/runner.py); every bucket is compiled once at start-up. Block
tables carry one more column than any row uses, always the null page: padded prompt tokens are
placed there, so their keys and values never land in a real page.

With LoRA adapter slots (engine/model/layers/lora.py), prefill, decode and verify take the slots' stack
and each row's slot; `set_slot` writes one slot's columns into the donated stack (an adapter
loaded or cleared between steps, never a compile). Without slots the stack is None and the steps
are the plain model's.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import PyTreeDef

from engine.api import MAX_TOP_LOGPROBS
from engine.device.sampling import Sampled, SamplerInputs, greedy, plain, sample
from engine.model.layers.kv_cache import NewKV, PagedLayerCache, to_pool
from engine.model.layers.lora import LoraBatch, LoraStack, LoraWeights

Array = jax.Array
KVPages = tuple[PagedLayerCache, ...]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Written:
    """A step's new keys and values, all layers in one array [L, 2 (key, value), B, T, K, H] (one
    output and one input instead of two per layer: each array costs the step's dispatch time), and
    where they go: page and slot [B,T]."""

    new: Array
    pages: Array
    slots: Array


def _written(new: Any, positions: Array, block_tables: Array, page_size: int) -> Written:
    rows = jnp.arange(positions.shape[0])[:, None]
    pages = block_tables[rows, positions // page_size]
    stacked = jnp.stack([jnp.stack([n.k, n.v]) for n in cast(tuple[NewKV, ...], new)])
    return Written(stacked, pages, positions % page_size)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class LaneState:
    """Penalty state per lane (one extra lane absorbs padding rows)."""

    seen: Array  # bool[lanes + 1, V]: tokens of the prompt or output
    output_counts: Array  # i32[lanes + 1, V]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PromptScores:
    """A scored prefill chunk's numbers on the device (engine/device/runner_api.py's, there on the host)."""

    logprobs: Array  # f32[T]
    ranks: Array  # i32[T]
    top_ids: Array  # i32[T, MAX_TOP_LOGPROBS]
    top_logprobs: Array  # f32[T, MAX_TOP_LOGPROBS]


# A per-lane table: on the host (LaneTables keeps its own) or on the device (what a step gets).
LaneTable = np.ndarray | Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class RowParams:
    """SamplerInputs without the penalty state, which lives on the device in LaneState.

    The runner keeps a table of these, a row per lane, on the device (engine/device/lane_tables.py)
    and passes it whole to each step, which takes its rows' (`_of_lanes`); inside the jitted step
    the fields are tracers.
    """

    temperature: LaneTable
    top_k: LaneTable
    top_p: LaneTable
    min_p: LaneTable
    repetition_penalty: LaneTable
    presence_penalty: LaneTable
    frequency_penalty: LaneTable
    bias_ids: LaneTable
    bias_values: LaneTable
    allowed: LaneTable
    seed: LaneTable
    counter: LaneTable
    logprobs: LaneTable
    scored_ids: LaneTable


class StepFunctions:
    """The jitted functions for one model's forward pass (one set per engine).

    They take the model's parameters as the flat list of the tree's leaves (`params_tree` rebuilds
    the tree inside): a call's dispatch compares its arguments' tree with the compiled one's, which
    for a tree of nested dicts with hundreds of leaves is a cost every step pays."""

    def __init__(self, model: nn.Module, params_tree: PyTreeDef, page_size: int, prefill_rows: int) -> None:
        def forward(
            params: list[Array],
            lora: LoraBatch | None,
            *inputs: Array | KVPages | None,
            draft_step: bool = False,
            media: Array | None = None,
            rope: Array | None = None,
        ) -> tuple[Array, Any]:
            tree = jax.tree.unflatten(params_tree, params)
            return model.apply(
                {"params": tree}, *inputs, draft_step=draft_step, lora=lora, media=media, rope_positions=rope
            )

        def adapters(stack: LoraStack | None, slots: Array | None) -> LoraBatch | None:
            return None if stack is None or slots is None else LoraBatch(stack, slots)

        def chosen(logits: Array, lanes: LaneState, lane_ids: Array, rows: RowParams) -> Sampled:
            def drawn(logits: Array, lanes: LaneState, lane_ids: Array, rows: RowParams) -> Sampled:
                seen, counts = lanes.seen[lane_ids], lanes.output_counts[lane_ids]
                return sample(logits, SamplerInputs(**vars(rows), seen=seen, output_counts=counts))

            def greedy_only(logits: Array, _lanes: LaneState, _lane_ids: Array, rows: RowParams) -> Sampled:
                return greedy(logits, rows.bias_ids, rows.bias_values, rows.scored_ids)

            # The penalty state is gathered inside the branch that needs it: as an operand of the
            # branch, XLA would gather it for every step.
            is_plain = plain(
                rows.temperature,
                rows.repetition_penalty,
                rows.presence_penalty,
                rows.frequency_penalty,
                rows.allowed,
                rows.logprobs,
            )
            return jax.lax.cond(is_plain, greedy_only, drawn, logits, lanes, lane_ids, rows)

        def counted(lanes: LaneState, lane_ids: Array, token: Array) -> LaneState:
            return LaneState(
                lanes.seen.at[lane_ids, token].set(True),
                lanes.output_counts.at[lane_ids, token].add(1),
            )

        def sampled_rows(
            logits: Array, lanes: LaneState, lane_ids: Array, rows: RowParams
        ) -> tuple[LaneState, Sampled]:
            sampled = chosen(logits, lanes, lane_ids, rows)
            return counted(lanes, lane_ids, sampled.token), sampled

        def prefill(
            params: list[Array],
            lora: LoraStack | None,
            kv: KVPages,
            tokens: Array,
            positions: Array,
            block_tables: Array,
            last: Array,
            slots: Array,
            media: Array | None = None,
            rope: Array | None = None,
        ) -> tuple[Written, Array]:
            """The chunks' keys and values, and each row's logits at its chunk index `last` [B] (on a
            prompt's final chunk, its last token: the first output token is sampled from them),
            padded to [prefill_rows, V] so that `first_tokens` sees one shape. `slots` [B]: each
            row's adapter slot in `lora` (None: the engine has no adapter slots). A model that takes
            images gets `media` [B,T,D], its image tokens' embeddings, and `rope` [B,T,3], every
            token's M-RoPE position."""
            lora_rows = adapters(lora, slots)
            logits, new = forward(params, lora_rows, tokens, positions, kv, block_tables, last, media=media, rope=rope)
            padded = jnp.zeros((prefill_rows, logits.shape[-1]), logits.dtype).at[: logits.shape[0]].set(logits[:, 0])
            return _written(new, positions, block_tables, page_size), padded

        def prefill_scored(
            params: list[Array],
            lora: LoraStack | None,
            kv: KVPages,
            tokens: Array,
            positions: Array,
            block_tables: Array,
            last: Array,
            slots: Array,
            targets: Array,
            media: Array | None = None,
            rope: Array | None = None,
        ) -> tuple[Written, Array, PromptScores]:
            """`prefill` of one chunk that also scores it: every position's logits go through the
            head, and at each the log-softmax's value at `targets` [1, T] (the token that follows
            in the prompt; -1: none), the target's rank (1: the likeliest) and the MAX_TOP_LOGPROBS best."""
            lora_rows = adapters(lora, slots)
            logits, new = forward(params, lora_rows, tokens, positions, kv, block_tables, None, media=media, rope=rope)
            padded = jnp.zeros((prefill_rows, logits.shape[-1]), logits.dtype).at[0].set(logits[0, last[0]])
            logprobs = jax.nn.log_softmax(logits[0].astype(jnp.float32), axis=-1)
            chosen = jnp.take_along_axis(logprobs, jnp.maximum(targets[0], 0)[:, None], axis=-1)[:, 0]
            top_logprobs, top_ids = jax.lax.top_k(logprobs, min(MAX_TOP_LOGPROBS, logprobs.shape[-1]))
            ranks = 1 + jnp.sum(logprobs > chosen[:, None], axis=-1, dtype=jnp.int32)
            scores = PromptScores(chosen, ranks, top_ids.astype(jnp.int32), top_logprobs)
            return _written(new, positions, block_tables, page_size), padded, scores

        def first_tokens(
            lanes: LaneState, logits: Array, source: Array, lane_ids: Array, tables: RowParams
        ) -> tuple[LaneState, Sampled]:
            """Each row's first output token from its prompt's last logits (row `source` of a prefill
            step's): a request's n rows share one prefill, each draws with its own key and parameters."""
            rows = _of_lanes(tables, lane_ids)
            prompt_logits = jnp.broadcast_to(logits[source], (lane_ids.shape[0], logits.shape[-1]))
            return sampled_rows(prompt_logits, lanes, lane_ids, rows)

        def decode(
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
            rows = _of_lanes(tables, lane_ids)
            logits_at = jnp.zeros(tokens.shape[0], jnp.int32)
            lora_rows = adapters(lora, slots)
            rope = None if rope_shifts is None else (positions + rope_shifts)[:, None]
            logits, new = forward(
                params, lora_rows, tokens[:, None], positions[:, None], kv, block_tables, logits_at, rope=rope
            )
            lanes, sampled = sampled_rows(logits[:, 0], lanes, lane_ids, rows)
            return _written(new, positions[:, None], block_tables, page_size), lanes, sampled

        def verify(
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
            rows = _of_lanes(tables, lane_ids)
            # logits_at None: every position's logits
            lora_rows = adapters(lora, slots)
            rope = None if rope_shifts is None else positions + rope_shifts[:, None]
            logits, new = forward(
                params, lora_rows, tokens, positions, kv, block_tables, None, draft_step=True, rope=rope
            )
            offsets = jnp.tile(jnp.arange(T, dtype=rows.counter.dtype), B)
            per_position = jax.tree.map(lambda value: jnp.repeat(value, T, axis=0), rows)
            per_position = dataclasses.replace(per_position, counter=per_position.counter + offsets)
            sampled = chosen(logits.reshape(B * T, -1), lanes, jnp.repeat(lane_ids, T), per_position)
            drawn = sampled.token.reshape(B, T)
            agrees = (drawn[:, :-1] == tokens[:, 1:]) & (jnp.arange(T - 1)[None, :] < drafts[:, None])
            taken = 1 + jnp.sum(jnp.cumprod(agrees.astype(jnp.int32), axis=1), axis=1)
            lanes = counted(lanes, lane_ids, drawn[:, 0])
            return _written(new, positions, block_tables, page_size), lanes, sampled, taken

        def write(kv: KVPages, written: Written) -> KVPages:
            pages, slots = written.pages, written.slots

            def heads_first(new: Array) -> Array:  # [B,T,K,H] -> [K,B,T,H], the pool's layout
                return jnp.moveaxis(new, 2, 0)

            return tuple(
                PagedLayerCache(
                    c.k.at[:, pages, slots].set(to_pool(heads_first(written.new[i, 0]), c.k)),
                    c.v.at[:, pages, slots].set(to_pool(heads_first(written.new[i, 1]), c.v)),
                )
                for i, c in enumerate(kv)
            )

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
            return tuple(
                PagedLayerCache(c.k.at[:, target].set(c.k[:, source]), c.v.at[:, target].set(c.v[:, source]))
                for c in kv
            )

        def read_pages(kv: KVPages, pages: Array) -> Array:
            """[G, L, 2, K, page_size, H]: each page's keys and values over every layer, stored form."""
            return jnp.stack([jnp.stack([c.k[:, pages], c.v[:, pages]]) for c in kv]).transpose(3, 0, 1, 2, 4, 5)

        def write_pages(kv: KVPages, pages: Array, contents: Array) -> KVPages:
            layers = contents.transpose(1, 2, 3, 0, 4, 5)  # [L, 2, K, G, page_size, H]
            return tuple(
                PagedLayerCache(c.k.at[:, pages].set(layers[i, 0]), c.v.at[:, pages].set(layers[i, 1]))
                for i, c in enumerate(kv)
            )

        self.prefill = jax.jit(prefill)
        self.prefill_scored = jax.jit(prefill_scored)

        def set_slot(stack: LoraStack, first: Array, slot: LoraStack) -> LoraStack:
            """`stack` with the columns from `first` replaced by `slot`'s (one slot of the same rank)."""

            def placed(whole: Any, part: Any) -> Any:
                return LoraWeights(
                    jax.lax.dynamic_update_slice_in_dim(whole.a, part.a, first, whole.a.ndim - 1),
                    jax.lax.dynamic_update_slice_in_dim(whole.b, part.b, first, 0),
                )

            layers = tuple(
                {name: placed(weights, slot.layers[i][name]) for name, weights in layer.items()}
                for i, layer in enumerate(stack.layers)
            )
            return LoraStack(layers, stack.rank)

        self.decode = jax.jit(decode, donate_argnums=(3,))
        self.verify = jax.jit(verify, donate_argnums=(3,))
        self.set_slot = jax.jit(set_slot, donate_argnums=(0,))
        self.first_tokens = jax.jit(first_tokens, donate_argnums=(0,))
        self.write = jax.jit(write, donate_argnums=(0,))
        self.reset_lane = jax.jit(reset_lane, donate_argnums=(0,))
        self.copy_page = jax.jit(copy_page, donate_argnums=(0,))
        self.read_pages = jax.jit(read_pages)
        self.write_pages = jax.jit(write_pages, donate_argnums=(0,))


def _of_lanes(tables: RowParams, lane_ids: Array) -> RowParams:
    """The rows' parameters: each field's row of each of `lane_ids`."""
    return jax.tree.map(lambda table: table[lane_ids], tables)
