"""How long a row may be and how many KV pages the pool holds: one answer for the app and the engine."""

import jax.numpy as jnp

from engine.engine_config import EngineConfig
from engine.model.loading.loader import DTYPES, LoadedModel
from engine.model.model_config import ModelConfig

# Where the device reports no memory figures (XLA's CPU backend): room for every lane's full
# context, at most 2 GiB (which holds a 32k-token context of the default model).
NO_FIGURES_KV_MEMORY = 2 << 30


def max_context(model: ModelConfig, config: EngineConfig) -> int:
    """Tokens per row (prompt and output): the engine's setting, else the model's context."""
    return config.max_context or model.context_length or model.max_position_embeddings


def kv_dtype(model_dtype: str, kv_cache_dtype: str) -> jnp.dtype:
    """The KV pool's dtype: the model's unless `kv_cache_dtype` names one."""
    return jnp.dtype(DTYPES[model_dtype if kv_cache_dtype == "auto" else kv_cache_dtype])


def kv_bytes_per_token(model: LoadedModel, kv_cache_dtype: str) -> int:
    """Bytes of keys and values one token holds in the KV pool, over every layer."""
    c = model.config
    return 2 * c.num_layers * c.num_kv_heads * c.head_dim * kv_dtype(model.dtype, kv_cache_dtype).itemsize


def pool_pages(model: LoadedModel, config: EngineConfig) -> int:
    """Pages in the KV pool (plus the null page), from the first size setting given: `kv_pages`,
    `kv_memory_bytes`, `kv_memory_fraction` of the device's free memory, or where the device
    reports none, every lane's full context up to NO_FIGURES_KV_MEMORY."""
    if config.kv_pages:
        return config.kv_pages + 1
    per_token = kv_bytes_per_token(model, config.kv_cache_dtype)
    budget = config.kv_memory_bytes
    if not budget:
        memory = model.mesh.devices.flat[0].memory_stats() or {}
        free = memory.get("bytes_limit", 0) - memory.get("bytes_in_use", 0)
        budget = int(free * config.kv_memory_fraction)
    if not budget:
        # What `row_capacity` needs for every lane's full context, as llama-server's cache holds
        # its slots' (it held one lane and two pages a lane more: 54 MiB at 32 × 4,096 tokens).
        row_pages = -(-max_context(model.config, config) // config.page_size)
        every_lane_full = config.decode_lanes * (row_pages + 1) * config.page_size * per_token
        budget = min(NO_FIGURES_KV_MEMORY, every_lane_full)
    return budget // (config.page_size * per_token) + 1


def row_capacity(pages: int, lanes: int, page_size: int) -> int:
    """The most tokens one row may hold in a pool of `pages` (the null page included): beside it
    the pool keeps the null page and one private page per lane (each lane may need its own copy of
    a shared partial page)."""
    return (pages - 1 - lanes) * page_size
