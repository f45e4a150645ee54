"""Causal attention of a step's queries over their rows' pages (and the step's own keys, and in a
decode burst the burst's earlier keys, from its side buffer).

`paged_attention` dispatches: the native CPU kernels (engine/model/kernels) where they take the shapes,
everything else `xla_paged_attention`, an online softmax over blocks of pages.
"""

import jax
import jax.numpy as jnp

from engine.model import kernels
from engine.model.layers import head_major
from engine.model.layers.kv_cache import BurstSide, PagedLayerCache, pool_values, to_pool, value_dtype

Array = jax.Array

# Keys per turn of XLA's attention loop: blocks of absolute positions, [0, 128), [128, 256), ...,
# the same for every step's shape, so that a key is added to a query's softmax at the same turn and
# beside the same keys whether it was in the pool or among the step's own (a prompt split anywhere,
# a decode step beside any other rows). The loop runs only over the blocks a step's rows have filled.
ATTENTION_BLOCK_TOKENS = 128

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
    side: BurstSide | None = None,
) -> Array:
    """Causal attention of the step's queries q [B,T,K,G,H] over their rows' pages and the step's
    own keys and values k, v [B,T,K,H]; returns [B, T, K*G*H] float32. The native kernels on CPU
    where they take the shapes; everything else `xla_paged_attention`. A `draft_step` (a decode
    step over drafts: each row's tokens at consecutive positions, padding elsewhere) takes the
    decode kernel's arithmetic for every token, so a taken draft token's numbers are those of a
    decode step; XLA's path gives them up to rounding. With `side` (one token a row: a step of a
    decode burst), the positions just below each row's token are read from the burst's side
    buffer, not the pool: the numbers of a decode step there."""
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
        return xla_paged_attention(q, k, v, positions, cache, block_tables, side)
    if side is not None:
        inputs = (q, k, v, positions, cache, block_tables, side)
        return jax.lax.platform_dependent(*inputs, cpu=_native_burst_attention, default=xla_paged_attention)
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


def _native_burst_attention(
    q: Array, k: Array, v: Array, positions: Array, cache: PagedLayerCache, block_tables: Array, side: BurstSide
) -> Array:
    f32, i32 = jnp.float32, jnp.int32
    attended = kernels.paged_burst_attention(
        q[:, 0].astype(f32),
        k[:, 0].astype(f32),
        v[:, 0].astype(f32),
        to_pool(side.k, cache.k),
        to_pool(side.v, cache.v),
        cache.k,
        cache.v,
        block_tables.astype(i32),
        positions[:, 0].astype(i32),
        jnp.broadcast_to(side.count.astype(i32), positions.shape[:1]),
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
    q: Array,
    k: Array,
    v: Array,
    positions: Array,
    cache: PagedLayerCache,
    block_tables: Array,
    side: BurstSide | None = None,
) -> Array:
    """Causal attention of the step's queries q [B,T,K,G,H] over their rows' pages and the step's
    own keys and values k, v [B,T,K,H]; returns [B, T, K*G*H] float32.

    The pool holds every position before each row's first step position (earlier chunks, cached
    prefixes, earlier decode steps); the step's own tokens follow at consecutive positions (then
    padding). The softmax runs online (flash-attention style) over blocks of ATTENTION_BLOCK_TOKENS
    absolute positions, as far as the step's last real position, each block's keys read from the
    pool or, for the step's own positions, from k and v in the pool's stored form: a query's
    numbers are the same however its prompt was split, as the native CPU kernels' are. With
    `side` (a step of a decode burst, one token a row), the step's own keys are the side buffer's
    `side.count` entries and then its own: positions from the burst's first on.
    """
    B, T, K, G, H = q.shape
    page_size = cache.k.shape[2]
    block_pages = max(1, ATTENTION_BLOCK_TOKENS // page_size)
    block_tokens = block_pages * page_size
    columns = -(-block_tables.shape[1] // block_pages) * block_pages
    tables = jnp.pad(block_tables, ((0, 0), (0, columns - block_tables.shape[1])))
    own_k = pool_values(to_pool(k, cache.k))  # [B,T,K,H]: the step's keys as the pool will hold them
    own_v = pool_values(to_pool(v, cache.v))
    in_pool = positions[:, 0]  # [B] positions below this are read from the pages
    reach = jnp.max(in_pool) + T  # the positions any row attends end below this
    if side is not None:
        own_k = jax.lax.dynamic_update_slice_in_dim(side.k, own_k, side.count, axis=1)
        own_v = jax.lax.dynamic_update_slice_in_dim(side.v, own_v, side.count, axis=1)
        in_pool = in_pool - side.count
        reach = jnp.max(positions[:, 0]) + 1
    own_tokens = own_k.shape[1]
    dtype = value_dtype(cache.k)
    queries = head_major.queries(q, dtype)
    if queries.shape[1] == 1:  # XLA's one-row product adds in another order than its matmuls
        queries = jnp.concatenate([queries, queries], axis=1)
    rows = jnp.arange(B)[:, None]

    def block_of(pool: Array, own: Array, pages: Array, key_positions: Array) -> Array:
        """A block's keys or values [K*B, block_tokens, H]: the pool's, the step's own where they fall."""
        pooled = pool_values(pool[:, pages]).reshape(K, B, block_tokens, H)
        offset = key_positions[None, :] - in_pool[:, None]  # [B, block_tokens]
        mine = (offset >= 0) & (offset < own_tokens)
        own_here = own[rows, jnp.clip(offset, 0, own_tokens - 1)].transpose(2, 0, 1, 3)  # [K, B, block_tokens, H]
        return jnp.where(mine[None, :, :, None], own_here, pooled).reshape(K * B, block_tokens, H)

    def block(index: Array, state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        peak, total, acc = state
        pages = jax.lax.dynamic_slice_in_dim(tables, index * block_pages, block_pages, axis=1)
        key_positions = index * block_tokens + jnp.arange(block_tokens)
        keys = block_of(cache.k, own_k, pages, key_positions)
        values = block_of(cache.v, own_v, pages, key_positions)
        visible = key_positions[None, None, :] <= positions[:, :, None]  # [B, T, block_tokens]
        if T == 1:  # a branch costs a decode step more than masking its few scores
            scores = head_major.scores(queries, keys, visible)
        else:  # blocks every query sees whole (all but the last few of a long prompt) skip the masking pass
            whole = (index + 1) * block_tokens <= jnp.min(in_pool) + 1
            scores = jax.lax.cond(
                whole, lambda: head_major.scores(queries, keys, None), lambda: head_major.scores(queries, keys, visible)
            )
        new_peak = jnp.maximum(peak, jnp.max(scores, axis=-1))
        correction = jnp.exp(peak - new_peak)
        probs = jnp.exp(scores - new_peak[..., None])
        total = total * correction + _halving_sum(probs)
        return new_peak, total, acc * correction[..., None] + head_major.weighted(probs, values)

    f32 = jnp.float32
    state = (
        jnp.full(queries.shape[:2], -jnp.inf, f32),
        jnp.zeros(queries.shape[:2], f32),
        jnp.zeros((*queries.shape[:2], H), f32),
    )
    blocks = (reach + block_tokens - 1) // block_tokens
    _, total, acc = jax.lax.fori_loop(0, blocks, block, state)
    return head_major.step_major((acc / total[..., None])[:, : G * T], B, T)


def _halving_sum(x: Array) -> Array:
    """The sum over the last axis by halves (elementwise adds): one order for every shape, where
    XLA's reductions order a row's sum by how many rows there are."""
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        paired = x[..., :half] + x[..., half : 2 * half]
        x = jnp.concatenate([paired, x[..., 2 * half :]], axis=-1) if x.shape[-1] % 2 else paired
    return x[..., 0]
