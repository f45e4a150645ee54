"""Causal attention of a step's queries over their rows' pages (and the step's own keys).

`paged_attention` dispatches: the native CPU kernels (engine/model/kernels) where they take the shapes,
everything else `xla_paged_attention`, an online softmax over blocks of pages.
"""

import jax
import jax.numpy as jnp

from engine.model import kernels
from engine.model.layers import head_major
from engine.model.layers.kv_cache import PagedLayerCache, pool_values, to_pool, value_dtype

Array = jax.Array

# Keys gathered from the page pool per turn of XLA's attention loop. The loop runs only over the
# blocks a step's rows have filled, so a step costs what its context holds, whatever the block
# table's width. Smaller blocks gather fewer padding keys for short rows and keep a turn's
# gathered keys small; larger ones take fewer turns, each with a fixed overhead. So decode steps of
# many rows take smaller blocks than those of a few rows, and prefill steps, with hundreds of
# queries per row (a turn's fixed cost weighs less than its mask and rescaling passes), the
# largest. The sizes were measured on the default model (docs/BENCHMARKS.md).
DECODE_ATTENTION_BLOCK_TOKENS = 128
WIDE_DECODE_ATTENTION_BLOCK_TOKENS = 64
WIDE_DECODE_ROWS = 16
PREFILL_ATTENTION_BLOCK_TOKENS = 512


def attention_block_tokens(rows: int, step_tokens: int) -> int:
    """Keys per attention loop turn for a step of `rows` rows of `step_tokens` tokens each."""
    if step_tokens > 1:
        return PREFILL_ATTENTION_BLOCK_TOKENS
    return WIDE_DECODE_ATTENTION_BLOCK_TOKENS if rows >= WIDE_DECODE_ROWS else DECODE_ATTENTION_BLOCK_TOKENS


# The native attention kernels serve CPU steps: one-token steps (engine/model/kernels/paged_attention.cc)
# read each row's keys straight from its pages, where XLA gathers them into blocks first and runs
# a loop turn of small matmuls per block; prompt steps (paged_prefill_attention.cc) run a tiled
# flash attention in float32, where XLA's loop over blocks of keys takes most of a long prompt
# chunk's time. Their limits on the shapes:
NATIVE_MAX_HEAD_DIM, NATIVE_MAX_GROUP, NATIVE_MAX_PAGE_SIZE = 256, 16, 128
NATIVE_DECODE_HEAD_DIM_MULTIPLE = 8  # the decode kernel's vectors of eight floats


def paged_attention(
    q: Array,
    k: Array,
    v: Array,
    positions: Array,
    cache: PagedLayerCache,
    block_tables: Array,
    draft_step: bool = False,
) -> Array:
    """Causal attention of the step's queries q [B,T,K,G,H] over their rows' pages and the step's
    own keys and values k, v [B,T,K,H]; returns [B, T, K*G*H] float32. The native kernels on CPU
    where they take the shapes; everything else `xla_paged_attention`. A `draft_step` (a decode
    step over drafts: each row's tokens at consecutive positions, padding elsewhere) takes the
    decode kernel's arithmetic for every token, so a taken draft token's numbers are those of a
    decode step; XLA's path gives them up to rounding."""
    B, T, K, G, H = q.shape
    native = (
        H <= NATIVE_MAX_HEAD_DIM
        and G <= NATIVE_MAX_GROUP
        and cache.k.shape[2] <= NATIVE_MAX_PAGE_SIZE
        and value_dtype(cache.k) in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))
        and kernels.available()
    )
    one_token_kernel = T == 1 or draft_step
    if not native or (one_token_kernel and H % NATIVE_DECODE_HEAD_DIM_MULTIPLE != 0):
        return xla_paged_attention(q, k, v, positions, cache, block_tables)
    kernel = _native_prefill_attention
    if one_token_kernel:
        kernel = _native_decode_attention if T == 1 else _native_draft_attention
    return jax.lax.platform_dependent(q, k, v, positions, cache, block_tables, cpu=kernel, default=xla_paged_attention)


def _native_decode_attention(
    q: Array, k: Array, v: Array, positions: Array, cache: PagedLayerCache, block_tables: Array
) -> Array:
    f32 = jnp.float32
    attended = kernels.paged_decode_attention(
        q[:, 0].astype(f32),
        k[:, 0].astype(f32),
        v[:, 0].astype(f32),
        cache.k,
        cache.v,
        block_tables.astype(jnp.int32),
        positions[:, 0].astype(jnp.int32),
    )
    return attended[:, None]


def _native_draft_attention(
    q: Array, k: Array, v: Array, positions: Array, cache: PagedLayerCache, block_tables: Array
) -> Array:
    f32, i32 = jnp.float32, jnp.int32
    return kernels.paged_draft_attention(
        q.astype(f32),
        k.astype(f32),
        v.astype(f32),
        to_pool(k, cache.k),  # as `write` will store them: what a later decode step reads
        to_pool(v, cache.v),
        cache.k,
        cache.v,
        block_tables.astype(i32),
        positions.astype(i32),
    )


def _native_prefill_attention(
    q: Array, k: Array, v: Array, positions: Array, cache: PagedLayerCache, block_tables: Array
) -> Array:
    f32, i32 = jnp.float32, jnp.int32
    return kernels.paged_prefill_attention(
        q.astype(f32), k.astype(f32), v.astype(f32), cache.k, cache.v, block_tables.astype(i32), positions.astype(i32)
    )


def xla_paged_attention(
    q: Array, k: Array, v: Array, positions: Array, cache: PagedLayerCache, block_tables: Array
) -> Array:
    """Causal attention of the step's queries q [B,T,K,G,H] over their rows' pages and the step's
    own keys and values k, v [B,T,K,H]; returns [B, T, K*G*H] float32.

    The pool holds every position before each row's first step position (earlier chunks, cached
    prefixes, earlier decode steps); the step's own tokens are not in it yet. The softmax runs
    online (flash-attention style): the step's own keys first, then one block of pages per loop
    turn, for as many blocks as the longest row has filled.
    """
    B, T, K = q.shape[:3]
    H = q.shape[-1]
    page_size = cache.k.shape[2]
    block_pages = max(1, attention_block_tokens(B, T) // page_size)
    block_tokens = block_pages * page_size
    columns = -(-block_tables.shape[1] // block_pages) * block_pages
    tables = jnp.pad(block_tables, ((0, 0), (0, columns - block_tables.shape[1])))
    in_pool = positions[:, 0]  # [B] positions below this are read from the pages
    dtype = value_dtype(cache.k)
    queries = head_major.queries(q, dtype)

    own_visible = positions[:, None, :] <= positions[:, :, None]
    own = head_major.scores(queries, head_major.kv_heads(k, dtype), own_visible)
    peak = jnp.max(own, axis=-1)
    probs = jnp.exp(own - peak[..., None])
    state = (peak, jnp.sum(probs, axis=-1), head_major.weighted(probs, head_major.kv_heads(v, dtype)))

    def block(index: Array, state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        peak, total, acc = state
        pages = jax.lax.dynamic_slice_in_dim(tables, index * block_pages, block_pages, axis=1)
        keys = pool_values(cache.k[:, pages]).reshape(K * B, block_tokens, H)
        values = pool_values(cache.v[:, pages]).reshape(K * B, block_tokens, H)
        key_positions = index * block_tokens + jnp.arange(block_tokens)
        visible = jnp.broadcast_to((key_positions[None, :] < in_pool[:, None])[:, None], (B, T, block_tokens))
        if T == 1:  # a branch costs a decode step more than masking its few scores
            scores = head_major.scores(queries, keys, visible)
        else:  # blocks every row sees whole (all but a long prompt's last) skip the masking pass
            whole = (index + 1) * block_tokens <= jnp.min(in_pool)
            scores = jax.lax.cond(
                whole, lambda: head_major.scores(queries, keys, None), lambda: head_major.scores(queries, keys, visible)
            )
        new_peak = jnp.maximum(peak, jnp.max(scores, axis=-1))
        correction = jnp.exp(peak - new_peak)
        probs = jnp.exp(scores - new_peak[..., None])
        total = total * correction + jnp.sum(probs, axis=-1)
        return new_peak, total, acc * correction[..., None] + head_major.weighted(probs, values)

    blocks = (jnp.max(in_pool) + block_tokens - 1) // block_tokens
    _, total, acc = jax.lax.fori_loop(0, blocks, block, state)
    return head_major.step_major(acc / total[..., None], B, T)
