"""`AdapterSlots`: every LoRA adapter slot's pairs on the device, in one stack
(engine/model/layers/lora.py), which the steps take whole with each row's slot.

Loading an adapter into a slot, or clearing one, writes that slot's columns into the donated stack
between steps, through one compiled function: never a compile of the steps.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from engine.device.executables import own_jit
from engine.lora.adapter_stack import stack_adapters
from engine.lora.peft_adapter import LoraAdapter
from engine.model.layers.lora import LoraStack, LoraWeights
from engine.model.model_config import ModelConfig

Array = jax.Array


class AdapterSlots:
    def __init__(self, config: ModelConfig, slots: int, rank: int, dtype: jnp.dtype, placed: NamedSharding) -> None:
        """`slots` slots of rank `rank`, all empty; `placed`: where the steps' inputs live."""
        self._config, self._slots, self._rank, self._dtype = config, slots, rank, dtype
        self._placed = placed
        self.stack: LoraStack = jax.device_put(stack_adapters(config, [None] * slots, rank, dtype), placed)
        self._set_slot = own_jit(_set_slot, donate_argnums=(0,))

    def load(self, slot: int, adapter: LoraAdapter | None) -> None:
        """Puts `adapter` in `slot` (1 to `slots`), or clears the slot (None)."""
        assert 1 <= slot <= self._slots, "no such adapter slot"
        part = stack_adapters(self._config, [adapter], self._rank, self._dtype)
        first = np.int32((slot - 1) * self._rank)
        self.stack = self._set_slot(self.stack, first, jax.device_put(part, self._placed))


def _set_slot(stack: LoraStack, first: Array, slot: LoraStack) -> LoraStack:
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
