"""Layers shared by every model family, written once.

Axis letters in einsum strings follow `engine/GLOSSARY.md`. Parameters carry logical axis names
(`engine/sharding.py` maps them to the mesh). Matmuls accumulate in float32 and return the
activation dtype; norms, softmax and RoPE run in float32.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from engine import int4, int8, kernels
from engine.config import ModelConfig, RopeScaling

Array = jax.Array
_MASKED = -1e30


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


# A bfloat16 pool is stored as its bit pattern: XLA's CPU backend has no bfloat16 gather and
# converted the whole pool to float32 before each layer's gather (~5 s per decode step of the
# default model); an integer gather moves the same bytes, and the bitcasts are free.
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


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class NewKV:
    """This step's keys and values of one layer [B,T,K,H], returned for the caller to write into
    its pages (see `engine.step`): a forward pass that only reads the pool lets XLA keep it in
    place, where gathering from and writing to one donated pool made it copy the whole pool."""

    k: Array
    v: Array


# Keys gathered from the page pool per turn of the attention loop. The loop runs only over the
# blocks a step's rows have filled, so a step costs what its context holds, whatever the block
# table's width. Smaller blocks gather fewer padding keys for short rows and keep a turn's
# gathered keys small, larger ones take fewer turns (each with a fixed overhead). Measured on the
# default model with int8 matmuls and a bfloat16 pool (this project's 2-core CPU machine):
# - decode with 16 or more rows: 64-key blocks ran 32 requests of 32 prompt and 64 output tokens
#   at 389-421 tokens/s against 328-370 with 128, and 386-391 with 32; a 32-row step at 1k tokens
#   of context ran as fast with either;
# - decode with fewer rows: 128 (one row at 3k tokens of context: 48 ms a step against 54 with 64);
# - prefill: hundreds of queries per row, so a turn's fixed cost weighs less than its mask and
#   rescaling passes: 512-key blocks ran a 256-token chunk at 2.8k tokens of context in 409 ms
#   against 438 ms with 128.
DECODE_ATTENTION_BLOCK_TOKENS = 128
WIDE_DECODE_ATTENTION_BLOCK_TOKENS = 64
WIDE_DECODE_ROWS = 16
PREFILL_ATTENTION_BLOCK_TOKENS = 512


def attention_block_tokens(rows: int, step_tokens: int) -> int:
    """Keys per attention loop turn for a step of `rows` rows of `step_tokens` tokens each."""
    if step_tokens > 1:
        return PREFILL_ATTENTION_BLOCK_TOKENS
    return WIDE_DECODE_ATTENTION_BLOCK_TOKENS if rows >= WIDE_DECODE_ROWS else DECODE_ATTENTION_BLOCK_TOKENS


# Attention works head-major: queries [K*B, G*T, H] (every query head of a KV head, for every step
# token) against keys and values [K*B, S, H], as one batch of plain matmuls. On XLA CPU that ran
# 1.1-5.6x faster than an einsum over [B,T,K,G,H] and [B,S,K,H], and 8-15x faster than a
# broadcast multiply-and-sum (measured on the default model's shapes, decode and prefill).
# The matmuls take the KV pool's dtype and accumulate in float32: with a bfloat16 pool, a
# 256-key block of a 512-token prefill chunk ran 2x faster than in float32 (0.29 against 0.59 ms).


def _queries(q: Array, dtype: jnp.dtype) -> Array:
    """[B,T,K,G,H] -> [K*B, G*T, H] in `dtype`, pre-scaled by 1/sqrt(H)."""
    B, T, K, G, H = q.shape
    scaled = (q.astype(jnp.float32) / math.sqrt(H)).astype(dtype)
    return scaled.transpose(2, 0, 3, 1, 4).reshape(K * B, G * T, H)


def _kv_heads(x: Array, dtype: jnp.dtype) -> Array:
    """Keys or values [B,S,K,H] -> [K*B, S, H] in `dtype`."""
    B, S, K, H = x.shape
    return x.astype(dtype).transpose(2, 0, 1, 3).reshape(K * B, S, H)


def _scores(queries: Array, keys: Array, visible: Array | None) -> Array:
    """[K*B, G*T, S] scores; `visible` [B, T, S] says which key each step token may see (None: all)."""
    scores = jax.lax.dot_general(queries, keys, (((2,), (2,)), ((0,), (0,))), preferred_element_type=jnp.float32)
    if visible is None:
        return scores
    B, T, S = visible.shape
    grouped = scores.reshape(-1, B, queries.shape[1] // T, T, S)
    return jnp.where(visible[None, :, None], grouped, _MASKED).reshape(scores.shape)


def _weighted(probs: Array, values: Array) -> Array:
    """probs [K*B, G*T, S] over values [K*B, S, H] -> [K*B, G*T, H]."""
    dims = (((2,), (1,)), ((0,), (0,)))
    return jax.lax.dot_general(probs.astype(values.dtype), values, dims, preferred_element_type=jnp.float32)


def _step_major(attended: Array, B: int, T: int) -> Array:
    """[K*B, G*T, H] -> [B, T, K*G*H] (query heads in checkpoint order)."""
    K, H = attended.shape[0] // B, attended.shape[2]
    return attended.reshape(K, B, -1, T, H).transpose(1, 3, 0, 2, 4).reshape(B, T, -1)


# The native attention kernels serve CPU steps: one-token steps (engine/kernels/paged_attention.cc)
# read each row's keys straight from its pages, where XLA gathers them into blocks first and runs
# a loop turn of small matmuls per block; prompt steps (paged_prefill_attention.cc) run a tiled
# flash attention in float32, where XLA's loop over 512-key blocks took ~2 of the 2.5 s of a
# 440-token chunk at 2.5k tokens of context (default model, w4a8). Their limits on the shapes:
NATIVE_MAX_HEAD_DIM, NATIVE_MAX_GROUP, NATIVE_MAX_PAGE_SIZE = 256, 16, 128
NATIVE_DECODE_HEAD_DIM_MULTIPLE = 8  # the decode kernel's vectors of eight floats


def paged_attention(
    q: Array, k: Array, v: Array, positions: Array, cache: PagedLayerCache, block_tables: Array
) -> Array:
    """Causal attention of the step's queries q [B,T,K,G,H] over their rows' pages and the step's
    own keys and values k, v [B,T,K,H]; returns [B, T, K*G*H] float32. The native kernels on CPU
    where they take the shapes; everything else `xla_paged_attention`."""
    B, T, K, G, H = q.shape
    native = (
        H <= NATIVE_MAX_HEAD_DIM
        and G <= NATIVE_MAX_GROUP
        and cache.k.shape[2] <= NATIVE_MAX_PAGE_SIZE
        and value_dtype(cache.k) in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))
        and kernels.available()
    )
    if not native or (T == 1 and H % NATIVE_DECODE_HEAD_DIM_MULTIPLE != 0):
        return xla_paged_attention(q, k, v, positions, cache, block_tables)
    kernel = _native_decode_attention if T == 1 else _native_prefill_attention
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
    queries = _queries(q, dtype)

    own = _scores(queries, _kv_heads(k, dtype), positions[:, None, :] <= positions[:, :, None])
    peak = jnp.max(own, axis=-1)
    probs = jnp.exp(own - peak[..., None])
    state = (peak, jnp.sum(probs, axis=-1), _weighted(probs, _kv_heads(v, dtype)))

    def block(index: Array, state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        peak, total, acc = state
        pages = jax.lax.dynamic_slice_in_dim(tables, index * block_pages, block_pages, axis=1)
        keys = pool_values(cache.k[:, pages]).reshape(K * B, block_tokens, H)
        values = pool_values(cache.v[:, pages]).reshape(K * B, block_tokens, H)
        key_positions = index * block_tokens + jnp.arange(block_tokens)
        visible = jnp.broadcast_to((key_positions[None, :] < in_pool[:, None])[:, None], (B, T, block_tokens))
        if T == 1:  # a branch costs a decode step more than masking its few scores
            scores = _scores(queries, keys, visible)
        else:  # blocks every row sees whole (all but a long prompt's last) skip the masking pass
            whole = (index + 1) * block_tokens <= jnp.min(in_pool)
            scores = jax.lax.cond(whole, lambda: _scores(queries, keys, None), lambda: _scores(queries, keys, visible))
        new_peak = jnp.maximum(peak, jnp.max(scores, axis=-1))
        correction = jnp.exp(peak - new_peak)
        probs = jnp.exp(scores - new_peak[..., None])
        total = total * correction + jnp.sum(probs, axis=-1)
        return new_peak, total, acc * correction[..., None] + _weighted(probs, values)

    blocks = (jnp.max(in_pool) + block_tokens - 1) // block_tokens
    _, total, acc = jax.lax.fori_loop(0, blocks, block, state)
    return _step_major(acc / total[..., None], B, T)


def init_layer_caches(config: ModelConfig, batch: int, length: int, dtype: jnp.dtype) -> tuple[LayerCache, ...]:
    shape = (batch, length, config.num_kv_heads, config.head_dim)
    return tuple(LayerCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.num_layers))


def logical_param(
    module: nn.Module,
    name: str,
    shape: tuple[int, ...],
    axes: tuple[str | None, ...],
    dtype: jnp.dtype,
    init: nn.initializers.Initializer = nn.initializers.zeros,
) -> Array:
    """A parameter whose axes carry logical names (real values always come from a checkpoint)."""
    return cast(Array, module.param(name, nn.with_logical_partitioning(init, axes), shape, dtype))


def einsum(equation: str, *operands: Array, dtype: jnp.dtype) -> Array:
    return jnp.einsum(equation, *operands, preferred_element_type=jnp.float32).astype(dtype)


def quantized_param(
    module: nn.Module,
    name: str,
    channels: tuple[int, ...],
    channel_axes: tuple[str, ...],
    inputs: tuple[int, ...],
    input_axes: tuple[str, ...],
    weights: str,
) -> int8.Weight:
    """An output-major int8 weight `name` ([*channels, *inputs]) with its `name_scale` per output
    channel; as "int4" (where engine/int4.py can pack it) one uint8 array `name` of Q4_1 blocks over the
    inputs as one flat axis, whose input axis is never split across devices (its bytes interleave
    groups of channels), its channels are."""
    depth = math.prod(inputs)
    if weights == "int4" and int4.packable(channels[-1], depth):
        packed = (*channels, int4.packed_bytes(depth))
        return int8.Weight(logical_param(module, name, packed, (*channel_axes, None), jnp.uint8))
    scale = logical_param(module, f"{name}_scale", channels, channel_axes, jnp.float32)
    values = logical_param(module, name, (*channels, *inputs), (*channel_axes, *input_axes), jnp.int8)
    return int8.Weight(values, scale)


class Projection(nn.Module):
    """A weight (and optional bias) contracted with the input by `equation`."""

    equation: str
    kernel_shape: tuple[int, ...]
    kernel_axes: tuple[str, ...]
    bias_axes: tuple[str, ...] | None = None  # bias covers the trailing output axes
    dtype: jnp.dtype = jnp.float32
    # With n > 1, x's last n axes and the kernel's first n axes contract as one flat axis in a plain
    # matmul (the equation only documents it): given several contracting axes (o: N, H), XLA CPU
    # transposed the whole weight on every call.
    merged: int = 1
    weights: str = "float"  # ModelConfig.matmul_weights

    def setup(self) -> None:
        if self.weights == "float":
            self.kernel = logical_param(self, "kernel", self.kernel_shape, self.kernel_axes, self.dtype)
        else:
            # Output-major ([N..., K...], see engine/int8.py): the output axes move to the front.
            m = self.merged
            self.quantized = quantized_param(
                self,
                "kernel",
                self.kernel_shape[m:],
                self.kernel_axes[m:],
                self.kernel_shape[:m],
                self.kernel_axes[:m],
                self.weights,
            )
        if self.bias_axes is not None:
            bias_shape = self.kernel_shape[-len(self.bias_axes) :]
            self.bias = logical_param(self, "bias", bias_shape, self.bias_axes, self.dtype)

    def __call__(self, x: Array) -> Array:
        if self.weights != "float":
            return project(x, [self])[0]
        if self.merged > 1:
            flat_x = x.reshape(*x.shape[: -self.merged], -1)
            flat_kernel = self.kernel.reshape(-1, *self.kernel.shape[self.merged :])
            y = jnp.matmul(flat_x, flat_kernel, preferred_element_type=jnp.float32).astype(self.dtype)
        else:
            y = einsum(self.equation, x, self.kernel, dtype=self.dtype)
        return self.biased(y)

    def biased(self, y: Array) -> Array:
        return y + self.bias if self.bias_axes is not None else y


def project(x: Array, projections: Sequence[Projection]) -> list[Array]:
    """Several projections of one input. Int8 ones quantize x once and share one matmul call (one
    native call for a decode step on CPU: 3 weights streamed at once instead of 3 calls)."""
    if projections[0].weights == "float":
        return [projection(x) for projection in projections]
    ys = int8.flat_matmuls(x, [projection.quantized for projection in projections], projections[0].merged)
    return [projection.biased(y.astype(projection.dtype)) for projection, y in zip(projections, ys, strict=True)]


class RMSNorm(nn.Module):
    size: int
    eps: float
    axis_name: str
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = logical_param(self, "scale", (self.size,), (self.axis_name,), self.dtype, nn.initializers.ones)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return scale * normed.astype(self.dtype)


class Embedding(nn.Module):
    vocab_size: int
    hidden_size: int
    dtype: jnp.dtype = jnp.float32
    weights: str = "float"  # ModelConfig.matmul_weights; quantized, one scale per token

    def setup(self) -> None:
        if self.weights == "float":
            shape = (self.vocab_size, self.hidden_size)
            self.embedding = logical_param(self, "embedding", shape, ("vocab", "embed"), self.dtype)
        else:
            self.quantized = quantized_param(
                self, "embedding", (self.vocab_size,), ("vocab",), (self.hidden_size,), ("embed",), self.weights
            )

    def __call__(self, tokens: Array) -> Array:
        if self.weights != "float":
            return int8.rows(self.quantized, tokens).astype(self.dtype)
        return jnp.take(self.embedding, tokens, axis=0)

    def attend(self, x: Array) -> Array:
        """Logits against the embedding matrix (tied output head)."""
        if self.weights != "float":
            return int8.matmul(x, self.quantized)
        return einsum("BTD,VD->BTV", x, self.embedding, dtype=jnp.float32)


# --- RoPE: frequencies as in transformers' modeling_rope_utils ---------------------------------


def _default_inv_freq(base: float, dim: int) -> np.ndarray:
    return (1.0 / base ** (np.arange(0, dim, 2, dtype=np.float32) / dim)).astype(np.float32)


def _yarn(base: float, dim: int, s: RopeScaling) -> tuple[np.ndarray, float]:
    assert s.original_max_position_embeddings is not None
    original = s.original_max_position_embeddings

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if s.attention_factor is not None:
        attention_factor = s.attention_factor
    elif s.mscale and s.mscale_all_dim:
        attention_factor = mscale(s.factor, s.mscale) / mscale(s.factor, s.mscale_all_dim)
    else:
        attention_factor = mscale(s.factor)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(s.beta_fast or 32), correction_dim(s.beta_slow or 1)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrapolation_weight = 1 - ramp
    extrapolated = _default_inv_freq(base, dim)
    interpolated = extrapolated / s.factor
    inv_freq = interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight
    return inv_freq.astype(np.float32), attention_factor


def _llama3(base: float, dim: int, s: RopeScaling) -> np.ndarray:
    assert s.original_max_position_embeddings and s.low_freq_factor and s.high_freq_factor
    inv_freq = _default_inv_freq(base, dim)
    old_context = s.original_max_position_embeddings
    low_wavelen, high_wavelen = old_context / s.low_freq_factor, old_context / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


def rope_frequencies(config: ModelConfig, positions: Array, real: Array | None = None) -> tuple[Array, float]:
    """Inverse frequencies ([R], or [B,R] for dynamic NTK) and the cos/sin scale for a step at
    `positions` [B,T]; `real` [B,T] marks the tokens that are not padding (default: all).

    Only dynamic NTK depends on the positions: like transformers, it stretches the base once the
    sequence outgrows `max_position_embeddings`, here per row (from the row's own furthest real
    position), so a row's rotation never depends on the rows batched with it.
    """
    base, dim, s = config.rope_theta, config.head_dim, config.rope_scaling
    if s.kind == "linear":
        return jnp.asarray(_default_inv_freq(base, dim) / s.factor), 1.0
    if s.kind == "yarn":
        inv_freq, attention_factor = _yarn(base, dim, s)
        return jnp.asarray(inv_freq), attention_factor
    if s.kind == "llama3":
        return jnp.asarray(_llama3(base, dim, s)), 1.0
    if s.kind == "dynamic":
        trained = config.max_position_embeddings
        furthest = jnp.max(positions if real is None else jnp.where(real, positions, 0), axis=1)
        seq_len = jnp.maximum(furthest + 1, trained).astype(jnp.float32)  # [B]
        stretched = base * ((s.factor * seq_len / trained) - (s.factor - 1)) ** (dim / (dim - 2))
        exponents = jnp.arange(0, dim, 2, dtype=jnp.float32) / dim
        return 1.0 / stretched[:, None] ** exponents, 1.0
    return jnp.asarray(_default_inv_freq(base, dim)), 1.0


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Rotation:
    """A step's rotary embedding: cos and sin [B,T,1,R] of each token's angles, times the scale."""

    cos: Array
    sin: Array


def rope_rotation(config: ModelConfig, positions: Array, real: Array | None = None) -> Rotation:
    """The rotation of a step at `positions` [B,T] (`real` as for `rope_frequencies`), computed once
    for every layer."""
    inv_freq, scale = rope_frequencies(config, positions, real)
    per_row = inv_freq if inv_freq.ndim == 2 else inv_freq[None]
    angles = positions.astype(jnp.float32)[:, :, None] * per_row[:, None, :]

    def rotation() -> tuple[Array, Array]:
        return jnp.cos(angles) * scale, jnp.sin(angles) * scale

    def materialized() -> tuple[Array, Array]:
        # XLA's CPU fusion put the cosine and sine into every rotation, computing them for each
        # element of each head (jax.profiler, default model: 8-9 ms of a 32-row decode step, ~2 with
        # this). A conditional's results are buffers it cannot fuse into (an optimization barrier
        # is gone before fusion on CPU); both branches are one, the predicate only unknown to XLA.
        return jax.lax.cond(positions[0, 0] >= 0, rotation, rotation)

    cos, sin = jax.lax.platform_dependent(cpu=materialized, default=rotation)
    return Rotation(cos[:, :, None, :], sin[:, :, None, :])


def apply_rope(x: Array, rotation: Rotation) -> Array:
    """Rotates x [B,T,*,H] (HF "rotate_half" layout: first half pairs with second)."""
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    cos, sin = rotation.cos, rotation.sin
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


# --- Blocks -------------------------------------------------------------------------------------


AnyCache = LayerCache | PagedLayerCache
# What a layer hands back: the updated contiguous cache, or (paged) the step's new keys and values.
CacheOut = LayerCache | NewKV


class Attention(nn.Module):
    """Grouped-query causal self-attention over `cache` when given.

    A contiguous cache is written at `positions` and returned. A paged cache (with the rows' block
    tables [B,M]) is only read; the step's keys and values come back as `NewKV`.
    """

    config: ModelConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(
        self,
        x: Array,
        positions: Array,
        rotation: Rotation,
        cache: AnyCache | None,
        block_tables: Array | None = None,
    ) -> tuple[Array, CacheOut | None]:
        c = self.config
        D, N, K, H, G = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.queries_per_kv_head
        bias_q = ("q_heads", "head_dim") if c.qkv_bias else None
        bias_kv = ("kv_heads", "head_dim") if c.qkv_bias else None

        def projection(
            equation: str, shape: tuple[int, ...], axes: tuple[str, ...], bias: tuple[str, ...] | None, name: str
        ) -> Projection:
            return Projection(equation, shape, axes, bias, self.dtype, weights=c.matmul_weights, name=name)

        q, k, v = project(
            x,
            [
                projection("BTD,DNH->BTNH", (D, N, H), ("embed", "q_heads", "head_dim"), bias_q, "q"),
                projection("BTD,DKH->BTKH", (D, K, H), ("embed", "kv_heads", "head_dim"), bias_kv, "k"),
                projection("BTD,DKH->BTKH", (D, K, H), ("embed", "kv_heads", "head_dim"), bias_kv, "v"),
            ],
        )
        if c.qk_norm:
            q = RMSNorm(H, c.rms_norm_eps, "head_dim", self.dtype, name="q_norm")(q)
            k = RMSNorm(H, c.rms_norm_eps, "head_dim", self.dtype, name="k_norm")(k)
        q = apply_rope(q, rotation)
        k = apply_rope(k, rotation)

        B, T = x.shape[:2]
        if isinstance(cache, PagedLayerCache):
            assert block_tables is not None, "a paged cache needs block tables"
            attended = paged_attention(q.reshape(B, T, K, G, H), k, v, positions, cache, block_tables)
            returned_cache: CacheOut | None = NewKV(k, v)
        else:
            returned_cache = None
            if cache is None:
                keys, values, key_positions = k, v, positions
            else:
                rows = jnp.arange(B)[:, None]
                returned_cache = LayerCache(
                    cache.k.at[rows, positions].set(k.astype(cache.k.dtype)),
                    cache.v.at[rows, positions].set(v.astype(cache.v.dtype)),
                )
                keys, values = returned_cache.k, returned_cache.v
                key_positions = jnp.broadcast_to(jnp.arange(keys.shape[1]), (B, keys.shape[1]))
            causal = key_positions[:, None, :] <= positions[:, :, None]  # [B, T, S]
            dtype = keys.dtype
            scores = _scores(_queries(q.reshape(B, T, K, G, H), dtype), _kv_heads(keys, dtype), causal)
            attended = _step_major(_weighted(jax.nn.softmax(scores, axis=-1), _kv_heads(values, dtype)), B, T)
        out = attended.astype(self.dtype).reshape(B, T, N, H)
        o_bias = ("embed",) if c.o_bias else None
        o = Projection(
            "BTNH,NHD->BTD",
            (N, H, D),
            ("q_heads", "head_dim", "embed"),
            o_bias,
            self.dtype,
            merged=2,
            weights=c.matmul_weights,
            name="o",
        )
        return o(out), returned_cache


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    hidden_size: int
    intermediate_size: int
    dtype: jnp.dtype = jnp.float32
    weights: str = "float"  # ModelConfig.matmul_weights

    @nn.compact
    def __call__(self, x: Array) -> Array:
        D, F, w = self.hidden_size, self.intermediate_size, self.weights
        gate, up = project(
            x,
            [
                Projection("BTD,DF->BTF", (D, F), ("embed", "ffn"), dtype=self.dtype, weights=w, name=name)
                for name in ("gate", "up")
            ],
        )
        down = Projection("BTF,FD->BTD", (F, D), ("ffn", "embed"), dtype=self.dtype, weights=w, name="down")
        return down(nn.silu(gate) * up)


class MoE(nn.Module):
    """Qwen3-MoE sparse block: softmax over experts, keep the top k, optionally renormalise.

    Every expert runs on every token and unselected experts get weight zero: exact and simple, and
    fine for tiny and mid-size models; a gather-based dispatch can replace it without changing params.
    """

    config: ModelConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        c = self.config
        D, E, F = c.hidden_size, c.num_experts, c.moe_intermediate_size

        router = logical_param(self, "router", (D, E), ("embed", "router"), self.dtype)
        gate = logical_param(self, "gate", (E, D, F), ("experts", "embed", "expert_ffn"), self.dtype)
        up = logical_param(self, "up", (E, D, F), ("experts", "embed", "expert_ffn"), self.dtype)
        down = logical_param(self, "down", (E, F, D), ("experts", "expert_ffn", "embed"), self.dtype)

        router_logits = einsum("BTD,DE->BTE", x, router, dtype=self.dtype)
        probs = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
        top_probs, top_experts = jax.lax.top_k(probs, c.num_experts_per_tok)
        if c.norm_topk_prob:
            top_probs = top_probs / jnp.sum(top_probs, axis=-1, keepdims=True)
        weights = jnp.einsum("BTX,BTXE->BTE", top_probs, jax.nn.one_hot(top_experts, E)).astype(self.dtype)

        gated = nn.silu(einsum("BTD,EDF->BTEF", x, gate, dtype=self.dtype))
        hidden = gated * einsum("BTD,EDF->BTEF", x, up, dtype=self.dtype)
        return einsum("BTEF,EFD,BTE->BTD", hidden, down, weights, dtype=self.dtype)


class DecoderLayer(nn.Module):
    config: ModelConfig
    sparse_mlp: bool
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(
        self,
        x: Array,
        positions: Array,
        rotation: Rotation,
        cache: AnyCache | None,
        block_tables: Array | None = None,
    ) -> tuple[Array, CacheOut | None]:
        c = self.config
        attended, cache_out = Attention(c, self.dtype, name="attn")(
            RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="attn_norm")(x),
            positions,
            rotation,
            cache,
            block_tables,
        )
        x = x + attended
        normed = RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="mlp_norm")(x)
        mlp: nn.Module = (
            MoE(c, self.dtype, name="moe")
            if self.sparse_mlp
            else GatedMLP(c.hidden_size, c.intermediate_size, self.dtype, c.matmul_weights, name="mlp")
        )
        return x + mlp(normed), cache_out


class Transformer(nn.Module):
    """Embedding, decoder layers, final norm and output head; returns float32 logits [B,T,V] and
    per layer the updated contiguous cache or, for a paged cache, the step's `NewKV`.

    With `logits_at` [B] only that query index of each row goes through the output head (logits
    [B,1,V]): a prefill chunk or decode step needs one row of logits, not T.
    """

    config: ModelConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(
        self,
        tokens: Array,
        positions: Array,
        caches: Sequence[AnyCache] | None = None,
        block_tables: Array | None = None,
        logits_at: Array | None = None,
    ) -> tuple[Array, tuple[CacheOut, ...] | None]:
        c = self.config
        # The embedding (often also the output head) stays int8 under "int4": the most sensitive matrix;
        # llama.cpp's Q4 files keep it at 8 bits too (SmolLM2-135M as a prompt: perplexity 46.3, 47.9 with it in Q4).
        head_weights = "int8" if c.matmul_weights == "int4" else c.matmul_weights
        embed = Embedding(c.vocab_size, c.hidden_size, self.dtype, head_weights, name="embed")
        x = embed(tokens)
        # Padded prompt tokens sit in the block table's last column, the null page.
        real = None
        if caches and isinstance(caches[0], PagedLayerCache) and block_tables is not None:
            real = positions < (block_tables.shape[1] - 1) * caches[0].k.shape[2]
        rotation = rope_rotation(c, positions, real)
        new_caches = []
        for i in range(c.num_layers):
            x, layer_cache = DecoderLayer(c, c.is_moe_layer(i), self.dtype, name=f"layer_{i}")(
                x, positions, rotation, None if caches is None else caches[i], block_tables
            )
            new_caches.append(layer_cache)
        if logits_at is not None:
            x = x[jnp.arange(x.shape[0]), logits_at][:, None]
        x = RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="final_norm")(x)
        if c.tie_word_embeddings:
            logits = embed.attend(x)
        elif c.matmul_weights != "float":
            V, D = c.vocab_size, c.hidden_size
            head = quantized_param(self, "lm_head", (V,), ("vocab",), (D,), ("embed",), head_weights)
            logits = int8.matmul(x, head)
        else:
            lm_head = logical_param(self, "lm_head", (c.hidden_size, c.vocab_size), ("embed", "vocab"), self.dtype)
            logits = einsum("BTD,DV->BTV", x, lm_head, dtype=jnp.float32)
        if caches is None:
            return logits, None
        return logits, tuple(cast(CacheOut, layer_cache) for layer_cache in new_caches)
