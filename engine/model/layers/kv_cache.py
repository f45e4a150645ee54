"""Key/value caches: contiguous per row, or pages of a pool shared by every row."""

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.model.model_config import ModelConfig

Array = jax.Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class LayerCache:
    """Contiguous key/value cache of one layer: slot s holds the token at position s."""

    k: Array  # [B, S, K, H]
    v: Array  # [B, S, K, H]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PagedLayerCache:
    """Paged key/value cache of one layer: a pool of fixed-size pages shared by every row.

    A row's block table lists its pages in order, so position p lives in slot p % page_size of page
    block_table[p // page_size]. Page 0 is never handed to a row: padding writes land there. The KV
    head axis comes first, so gathering a row's pages yields each head's keys contiguously, in
    the layout attention multiplies (no transpose of the gathered keys).
    """

    k: Array  # [K, P, page_size, H]
    v: Array  # [K, P, page_size, H]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class NewKV:
    """This step's keys and values of one layer [B,T,K,H], returned for the caller to write into
    its pages (see `engine.device.kv_pool`): a forward pass that only reads the pool lets XLA keep it in
    place, where gathering from and writing to one donated pool makes it copy the whole pool."""

    k: Array
    v: Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class BurstSide:
    """A decode burst's side buffer (engine/device/step.py): the keys and values of the burst's
    steps so far, [B, N, K, H] in the pool's value dtype (one layer's; the model's whole buffer
    stacks the layers first), its first `count` entries (i32 scalar) filled: each row's positions
    from its burst's first on, below the step's own. The pool is only read inside a burst; after
    it, the buffer is stored there once."""

    k: Array
    v: Array
    count: Array


AnyCache = LayerCache | PagedLayerCache
# What a layer hands back: the updated contiguous cache, or (paged) the step's new keys and values.
CacheOut = LayerCache | NewKV

# A bfloat16 pool is stored as its bit pattern: XLA's CPU backend has no bfloat16 gather and
# converts the whole pool to float32 before each layer's gather; an integer gather moves the same
# bytes, and the bitcasts are free.
_STORED_AS = {jnp.dtype(jnp.bfloat16): jnp.dtype(jnp.uint16)}
_HOLDS = {stored: values for values, stored in _STORED_AS.items()}


def value_dtype(pool: Array) -> jnp.dtype:
    """The dtype of the keys and values a pool holds (bfloat16 for its stored bit pattern)."""
    return _HOLDS.get(pool.dtype, pool.dtype)


def pool_values(stored: Array) -> Array:
    """Values read from a pool, in its value dtype."""
    dtype = value_dtype(stored)
    return stored if dtype == stored.dtype else jax.lax.bitcast_convert_type(stored, dtype)


def to_pool(values: Array, pool: Array) -> Array:
    """Values to write into `pool`, in its stored form."""
    values = values.astype(value_dtype(pool))
    return values if values.dtype == pool.dtype else jax.lax.bitcast_convert_type(values, pool.dtype)


def empty_pool(kv_heads: int, pages: int, page_size: int, head_dim: int, dtype: jnp.dtype) -> Array:
    """A zeroed pool of keys or values in `dtype`, in its stored form."""
    return jnp.zeros((kv_heads, pages, page_size, head_dim), _STORED_AS.get(jnp.dtype(dtype), dtype))


def init_paged_caches(config: ModelConfig, pages: int, page_size: int, dtype: jnp.dtype) -> tuple[PagedLayerCache, ...]:
    """Zeroed pools of `pages` pages per layer, holding keys and values in `dtype`."""

    def pool() -> Array:
        return empty_pool(config.num_kv_heads, pages, page_size, config.head_dim, dtype)

    return tuple(PagedLayerCache(pool(), pool()) for _ in range(config.num_layers))


def init_layer_caches(config: ModelConfig, batch: int, length: int, dtype: jnp.dtype) -> tuple[LayerCache, ...]:
    """Zeroed contiguous caches of `length` slots per row and layer, in `dtype`."""
    shape = (batch, length, config.num_kv_heads, config.head_dim)
    return tuple(LayerCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.num_layers))
