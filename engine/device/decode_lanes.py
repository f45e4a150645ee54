"""`DecodeLanes`: the runner's decode lanes — each lane's tables (`LaneTables`: block table,
sampling parameters, adapter slot) and penalty state on the device (`LaneState`), and the steps
that draw their tokens: a prompt's first tokens, decode steps and decode bursts (from host
tokens, or chained on the last step's tokens still on the device), steps that check drafts, and
taking a step's draws to the host.

A row's lane gets its parameters at `insert`, and its penalty state then only when its sampling
is penalised (a lane's stale state is read by no step otherwise). Every step writes its keys and
values into the runner's `KVPool` before it returns.

Threads: only the runner (engine/device/runner.py) calls it: on the thread that builds the engine
while it compiles, then on the engine thread alone.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from engine.device.adapter_slots import AdapterSlots
from engine.device.compiled_shapes import CompiledShapes
from engine.device.kv_pool import KVPool
from engine.device.lane_sampling import RowParams, empty_lane_state
from engine.device.lane_tables import LaneTables
from engine.device.runner_api import PREFILL_ROWS, DecodeRow, Drawn, InsertedRow, Pending, PromptLogits
from engine.device.sampling import Sampled
from engine.device.step import StepFunctions
from engine.stats import Bucket


@dataclass(frozen=True)
class _Step:
    """A dispatched decode step: its sampled tokens on the device (`width` per row, row-major),
    how many of each row's a verify step or burst takes (None: one each), whether any row wants
    logprobs, and a burst's last draws [B] (a chained step's input; None: `sampled.token`)."""

    sampled: Sampled
    logprobs: bool
    width: int = 1
    taken: jax.Array | None = None
    last: jax.Array | None = None


# Stop ids per row a burst checks on the device (padded with -1): a row with more has the rest
# checked on the host alone, which then ends it where the burst took tokens past such a stop.
BURST_STOP_IDS = 8


@dataclass(frozen=True)
class LaneSizes:
    """What the lanes are sized by."""

    lanes: int  # decode lanes (a spare one absorbs padding rows)
    vocab_size: int
    max_context: int
    rope_shifts: bool  # whether each row brings an M-RoPE shift (a model that takes images)


class DecodeLanes:
    def __init__(
        self,
        sizes: LaneSizes,
        steps: StepFunctions,
        params: list[jax.Array],
        pool: KVPool,
        adapters: AdapterSlots | None,
        shapes: CompiledShapes,
        placed: NamedSharding,
    ) -> None:
        """`params`: the decoder's parameter leaves; `placed`: where the steps' inputs and outputs
        live (replicated on the model's mesh)."""
        self._sizes, self._steps, self._params, self._pool = sizes, steps, params, pool
        self._adapters, self._shapes, self._placed = adapters, shapes, placed
        self._spare_lane = sizes.lanes
        self._state = jax.device_put(empty_lane_state(sizes.lanes + 1, sizes.vocab_size), placed)
        # A jitted identity places a host table as a step's argument would be placed: replicated
        # over the model's mesh, which in a process group spans processes (jax.device_put of a
        # host array to devices of other processes is refused).
        self._tables = LaneTables(
            sizes.lanes, shapes.width, sizes.vocab_size, jax.jit(lambda table: table, out_shardings=placed)
        )
        self.mask_words = self._tables.mask_words

    def insert(self, lane: int, row: InsertedRow) -> None:
        self._tables.insert(lane, row)
        if row.sampling.penalised:
            self._reset_lane(lane, row.prompt, row.output)

    def add_page(self, lane: int, index: int, page: int) -> None:
        self._tables.add_page(lane, index, page)

    def first_tokens(self, logits: PromptLogits, index: int, rows: Sequence[DecodeRow]) -> Drawn:
        lane_ids = self._tables.lane_ids(rows, self._shapes.ready_sizes("first_tokens"))
        params = self._tables.params()
        self._state, sampled = self._steps.first_tokens(self._state, logits, np.int32(index), lane_ids, params)
        return self.take(Pending(_Step(sampled, self._tables.logprobs(lane_ids))))

    def generate(self, rows: Sequence[DecodeRow], chained: Pending | None = None, burst: bool = False) -> Pending:
        if any(row.draft for row in rows):
            assert chained is None and not burst, "a step with drafts chained on a pending step, or a burst"
            return self._generate_verifying(rows)
        lane_ids = self._tables.lane_ids(rows, self._shapes.ready_sizes("burst" if burst else "decode"))
        positions = np.zeros(len(lane_ids), np.int32)
        positions[: len(rows)] = [row.position for row in rows]
        if chained is None:
            host_tokens = np.zeros(len(lane_ids), np.int32)
            host_tokens[: len(rows)] = [row.token for row in rows]
            tokens = jax.device_put(host_tokens, self._placed)
        else:
            previous = _step(chained)
            tokens = previous.sampled.token if previous.last is None else previous.last
        params = self._tables.params()
        shifts = self._rope_shifts(rows, len(lane_ids))
        if burst:
            budgets, stops = _burst_limits(rows, len(lane_ids))
            sampled, taken, last = self._run_step(
                self._steps.burst, tokens, positions, lane_ids, params, budgets, stops, *shifts
            )
            width = self._steps.burst_steps
            return Pending(_Step(sampled, self._tables.logprobs(lane_ids), width, taken, last))
        sampled = self._decode(tokens, positions, lane_ids, params, *shifts)
        return Pending(_Step(sampled, self._tables.logprobs(lane_ids)))

    def take(self, step: Pending) -> Drawn:
        sampled, width = _step(step).sampled, _step(step).width
        chosen = np.asarray(sampled.token).reshape(-1, width)
        taken = np.ones(len(chosen), np.int32) if _step(step).taken is None else np.asarray(_step(step).taken)
        if not _step(step).logprobs:
            return Drawn(chosen, taken, None)
        top = sampled.top_ids.shape[-1]
        return Drawn(
            chosen,
            taken,
            (
                np.asarray(sampled.logprob).reshape(-1, width),
                np.asarray(sampled.top_ids).reshape(-1, width, top),
                np.asarray(sampled.top_logprobs).reshape(-1, width, top),
                np.asarray(sampled.scored).reshape(-1, width, sampled.scored.shape[-1]),
            ),
        )

    def run_blank(self, bucket: Bucket) -> None:
        """Runs a bucket of the lanes' kinds (first tokens, decode, burst, verify, lane reset) on the spare
        lane alone, which compiles it and changes nothing real (the runner's `compile`)."""
        lane_ids = np.full(bucket.rows, self._spare_lane, np.int32)
        if bucket.kind == "first_tokens":
            logits = jax.device_put(jnp.zeros((PREFILL_ROWS, self._sizes.vocab_size), jnp.float32), self._placed)
            self._state, _ = self._steps.first_tokens(self._state, logits, np.int32(0), lane_ids, self._tables.params())
        elif bucket.kind == "decode":
            tokens = jax.device_put(np.zeros(bucket.rows, np.int32), self._placed)
            shifts = self._rope_shifts([], bucket.rows)
            self._decode(tokens, np.ones(bucket.rows, np.int32), lane_ids, self._tables.params(), *shifts)
        elif bucket.kind == "burst":
            tokens = jax.device_put(np.zeros(bucket.rows, np.int32), self._placed)
            budgets, stops = _burst_limits([], bucket.rows)  # no budget: every step's keys go to the null page
            inputs = (tokens, np.ones(bucket.rows, np.int32), lane_ids, self._tables.params(), budgets, stops)
            self._run_step(self._steps.burst, *inputs, *self._rope_shifts([], bucket.rows))
        elif bucket.kind == "verify":
            shape = (bucket.rows, bucket.tokens)
            tokens, positions = np.zeros(shape, np.int32), np.ones(shape, np.int32)
            drafts = np.full(bucket.rows, self._shapes.draft_tokens, np.int32)
            self._verify(
                tokens, positions, drafts, lane_ids, self._tables.params(), *self._rope_shifts([], bucket.rows)
            )
        else:
            assert bucket.kind == "reset_lane", f"not a lane bucket: {bucket.kind}"
            self._reset_lane(self._spare_lane, [], [])

    def _rope_shifts(self, rows: Sequence[DecodeRow], bucket: int) -> tuple[np.ndarray, ...]:
        """A model that takes images: each row's M-RoPE shift, padded to the step's rows."""
        if not self._sizes.rope_shifts:
            return ()
        shifts = np.zeros(bucket, np.int32)
        shifts[: len(rows)] = [row.rope_shift for row in rows]
        return (shifts,)

    def _generate_verifying(self, rows: Sequence[DecodeRow]) -> Pending:
        """A step over each row's token and its draft (positions after it), padded to a row
        bucket of steps with drafts."""
        lane_ids = self._tables.lane_ids(rows, self._shapes.ready_sizes("verify"))
        tokens, positions, drafts = self._shapes.verify_inputs(rows, len(lane_ids))
        params = self._tables.params()
        sampled, taken = self._verify(
            tokens, positions, drafts, lane_ids, params, *self._rope_shifts(rows, len(lane_ids))
        )
        return Pending(_Step(sampled, self._tables.logprobs(lane_ids), self._shapes.draft_tokens + 1, taken))

    def _verify(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        drafts: np.ndarray,
        lane_ids: np.ndarray,
        params: RowParams,
        *shifts: np.ndarray,
    ) -> tuple[Sampled, jax.Array]:
        sampled, taken = self._run_step(self._steps.verify, tokens, positions, lane_ids, params, drafts, *shifts)
        return sampled, taken

    def _decode(
        self, tokens: jax.Array, positions: np.ndarray, lane_ids: np.ndarray, params: RowParams, *shifts: np.ndarray
    ) -> Sampled:
        """`tokens` are on the device, placed like a step's sampled tokens: a step started from host
        tokens and one chained on the last step's run the same compiled program. `shifts`: the
        rows' M-RoPE shifts, for a model that takes images."""
        (sampled,) = self._run_step(self._steps.decode, tokens, positions, lane_ids, params, *shifts)
        return sampled

    def _run_step(
        self,
        step: Callable[..., tuple[Any, ...]],
        tokens: jax.Array | np.ndarray,
        positions: np.ndarray,
        lane_ids: np.ndarray,
        params: RowParams,
        *extra: np.ndarray,
    ) -> list[Any]:
        """Runs a decode-like step function over the lanes' block tables and writes its keys and
        values into the pool; returns what it returns after them and the lanes' penalty state."""
        adapters = self._adapters
        written, self._state, *results = step(
            self._params,
            None if adapters is None else adapters.stack,
            self._pool.pages,
            self._state,
            tokens,
            positions,
            self._tables.block_tables[lane_ids],
            lane_ids,
            params,
            None if adapters is None else self._tables.adapters[lane_ids],
            *extra,
        )
        self._pool.store(written)
        return results

    def _reset_lane(self, lane: int, prompt: Sequence[int], output: Sequence[int]) -> None:
        padded_prompt = np.full(self._sizes.max_context, -1, np.int32)
        padded_output = np.full(self._sizes.max_context, -1, np.int32)
        padded_prompt[: len(prompt)] = prompt
        padded_output[: len(output)] = output
        self._state = self._steps.reset_lane(self._state, np.int32(lane), padded_prompt, padded_output)


def _burst_limits(rows: Sequence[DecodeRow], bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """A burst's budgets [bucket] (tokens each row may still take; padding rows none) and stop
    ids [bucket, BURST_STOP_IDS] (-1: none)."""
    budgets = np.zeros(bucket, np.int32)
    stops = np.full((bucket, BURST_STOP_IDS), -1, np.int32)
    for i, row in enumerate(rows):
        budgets[i] = row.budget
        ids = sorted(row.stops)[:BURST_STOP_IDS]
        stops[i, : len(ids)] = ids
    return budgets, stops


def _step(pending: Pending) -> _Step:
    assert isinstance(pending, _Step), "a pending step of another runner"
    return pending
