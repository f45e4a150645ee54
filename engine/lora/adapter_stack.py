"""An adapter's pairs on the device: `stack_adapters` lays LoRA adapters (engine/lora/peft_adapter.py)
into the side-by-side slot matrices the decoder's projections take (engine/model/layers/lora.py)."""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from engine.errors import CheckpointError
from engine.lora.peft_adapter import LoraAdapter, projection_shapes
from engine.model.layers.lora import LoraStack, LoraWeights
from engine.model.model_config import ModelConfig


def stack_adapters(
    config: ModelConfig, adapters: Sequence[LoraAdapter | None], rank: int, dtype: jnp.dtype = jnp.float32
) -> LoraStack:
    """A stack whose slot i + 1 holds `adapters[i]` (None: left empty), every projection an
    adapter may target present (zero where an adapter does not target it)."""
    slots = len(adapters)
    for adapter in adapters:
        if adapter is not None and adapter.rank > rank:
            raise CheckpointError(f"{adapter.path}: rank {adapter.rank} is above the slots' rank {rank}")
    layers: list[dict[str, LoraWeights]] = []
    for layer in range(config.num_layers):
        weights = {}
        for name, (inputs, outputs) in projection_shapes(config, layer).items():
            a = np.zeros((*inputs, slots * rank), np.float32)
            b = np.zeros((slots * rank, *outputs), np.float32)
            for slot, adapter in enumerate(adapters):
                pair = adapter.pairs.get((layer, name)) if adapter is not None else None
                if pair is not None:
                    first, width = slot * rank, pair.a.shape[-1]
                    a[..., first : first + width] = pair.a
                    b[first : first + width] = pair.b
            weights[name] = LoraWeights(jnp.asarray(a, dtype), jnp.asarray(b, dtype))
        layers.append(weights)
    return LoraStack(tuple(layers), rank)
