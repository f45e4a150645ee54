"""The pure, jitted forward function over a family's parameter tree."""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model.layers.kv_cache import LayerCache
from engine.model.layers.lora import LoraBatch

ForwardFn = Callable[..., tuple[jax.Array, tuple[LayerCache, ...] | None]]


def make_forward(model: nn.Module) -> ForwardFn:
    """`forward(params, tokens[B,T], positions[B,T], kv_cache=None, lora=None) -> (logits[B,T,V] f32, kv_cache)`.

    With a cache (one `LayerCache` per layer, see `engine.model.layers.kv_cache.init_layer_caches`) the
    new keys and values are written at `positions` and attention reads every slot up to each
    query's position; the cache argument is donated. `lora` adds each row's adapter
    (engine/model/layers/lora.py).
    """

    def forward(
        params: Any,
        tokens: jax.Array,
        positions: jax.Array,
        kv_cache: Sequence[LayerCache] | None = None,
        lora: LoraBatch | None = None,
    ) -> tuple[jax.Array, tuple[LayerCache, ...] | None]:
        outputs = model.apply({"params": params}, tokens, positions, kv_cache, lora=lora)
        return cast(tuple[jax.Array, tuple[LayerCache, ...] | None], outputs)

    return jax.jit(forward, donate_argnames=("kv_cache",))


def abstract_params(model: nn.Module) -> tuple[Any, Any]:
    """Parameter shapes (ShapeDtypeStruct tree) and their logical axes (PartitionSpec tree)."""
    tokens = jnp.zeros((1, 1), jnp.int32)
    boxed = jax.eval_shape(partial(model.init, jax.random.key(0)), tokens, tokens)["params"]
    shapes = nn.meta.unbox(boxed)
    return shapes, nn.get_partition_spec(boxed)
