"""How a step draws its rows' tokens on the device, from each lane's sampling parameters
(`RowParams`) and penalty state (`LaneState`), and how each draw updates that state.

The runner keeps both whole on the device, a row per lane plus one spare lane that absorbs
padding rows (the parameters' host tables: engine/device/lane_tables.py). A step gathers its
rows' parameters (`of_lanes`); the penalty state is gathered only inside the branch that needs it
(`chosen`). Pure functions: the step functions (engine/device/step.py) call them inside their
own compiled programs, and jit `first_tokens` and `reset_lane` as programs of their own.
"""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from engine.device.sampling import Sampled, SamplerInputs, greedy, plain, sample

Array = jax.Array

# A per-lane table: on the host (LaneTables keeps its own) or on the device (what a step gets).
LaneTable = np.ndarray | Array


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

    The runner keeps a table of these, a row per lane, on the device (engine/device/lane_tables.py)
    and passes it whole to each step, which takes its rows' (`of_lanes`); inside the jitted step
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


def empty_lane_state(lanes: int, vocab_size: int) -> LaneState:
    """No lane has seen a token (`lanes` counts the spare one)."""
    return LaneState(jnp.zeros((lanes, vocab_size), bool), jnp.zeros((lanes, vocab_size), jnp.int32))


def of_lanes(tables: RowParams, lane_ids: Array) -> RowParams:
    """The rows' parameters: each field's row of each of `lane_ids`."""
    return jax.tree.map(lambda table: table[lane_ids], tables)


def chosen(logits: Array, lanes: LaneState, lane_ids: Array, rows: RowParams) -> Sampled:
    """Each row's draw from its logits [B, V], with its parameters and its lane's penalty state."""

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
    """The penalty state once each row's lane has drawn `token`."""
    return LaneState(
        lanes.seen.at[lane_ids, token].set(True),
        lanes.output_counts.at[lane_ids, token].add(1),
    )


def sampled_rows(logits: Array, lanes: LaneState, lane_ids: Array, rows: RowParams) -> tuple[LaneState, Sampled]:
    sampled = chosen(logits, lanes, lane_ids, rows)
    return counted(lanes, lane_ids, sampled.token), sampled


def first_tokens(
    lanes: LaneState, logits: Array, source: Array, lane_ids: Array, tables: RowParams
) -> tuple[LaneState, Sampled]:
    """Each row's first output token from its prompt's last logits (row `source` of a prefill
    step's): a request's n rows share one prefill, each draws with its own key and parameters."""
    rows = of_lanes(tables, lane_ids)
    prompt_logits = jnp.broadcast_to(logits[source], (lane_ids.shape[0], logits.shape[-1]))
    return sampled_rows(prompt_logits, lanes, lane_ids, rows)


def reset_lane(lanes: LaneState, lane: Array, prompt: Array, output: Array) -> LaneState:
    """Penalty state of a row from its tokens, padded with -1 (dropped)."""
    vocab = lanes.seen.shape[1]
    prompt = jnp.where(prompt < 0, vocab, prompt)
    output = jnp.where(output < 0, vocab, output)
    seen = lanes.seen.at[lane].set(False).at[lane, prompt].set(True, mode="drop")
    seen = seen.at[lane, output].set(True, mode="drop")
    counts = lanes.output_counts.at[lane].set(0).at[lane, output].add(1, mode="drop")
    return LaneState(seen, counts)
