"""Many LoRA adapters in one step: every adapter slot's low-rank pairs side by side on the device,
and each row of a step choosing its slot.

For a projection with kernel W, adapter slot s adds `(x · A_s) · B_s` (scale folded into B_s,
engine/lora/peft_adapter.py). The slots' A matrices stand side by side as one [*in, S·R] matrix and
their B matrices stacked as one [S·R, *out], each slot padded to the largest rank R with zero
columns (which add exact zeros). A step computes `x · A` for every slot at once — a thin matmul
beside the kernel's, in the same native call for float weights — keeps each row's own slot's R
columns and zeroes the rest, then multiplies by B: rows of different adapters, and rows without
one (slot 0, every column zeroed), share the step, and no row's numbers depend on the others'.
Nothing is gathered per row, and shapes depend only on the slot count and rank fixed at start-up,
so loading an adapter into a slot is a write into these arrays, never a compile.
"""

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp

Array = jax.Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class LoraWeights:
    """One projection's pairs for every slot: a [*in, S·R], b [S·R, *out]."""

    a: Array
    b: Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class LoraStack:
    """Every decoder layer's adapted projections (name → weights) over `slots` adapter slots of
    rank `rank` (slot 0, no adapter, has no columns)."""

    layers: tuple[dict[str, LoraWeights], ...]
    rank: int = dataclasses.field(metadata={"static": True})

    @property
    def slots(self) -> int:
        return next(iter(self.layers[0].values())).a.shape[-1] // self.rank


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class LoraBatch:
    """The stack and each row's slot [B] (0: no adapter) for one forward pass."""

    stack: LoraStack
    slots: Array


@dataclass(frozen=True)
class LoraRows:
    """What one decoder layer's projections need: its weights and the columns each row keeps."""

    weights: dict[str, LoraWeights]
    kept: Array  # bool [B, S·R]


def kept_columns(batch: LoraBatch) -> Array:
    """bool [B, S·R]: the columns of each row's own slot (none for slot 0)."""
    rank = batch.stack.rank
    return (jnp.arange(batch.stack.slots * rank) // rank + 1)[None, :] == batch.slots[:, None]
