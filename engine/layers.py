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
    block_table[p // page_size]. Page 0 is never handed to a row: padding writes land there.
    """

    k: Array  # [P, page_size, K, H]
    v: Array  # [P, page_size, K, H]


def init_paged_caches(config: ModelConfig, pages: int, page_size: int, dtype: jnp.dtype) -> tuple[PagedLayerCache, ...]:
    shape = (pages, page_size, config.num_kv_heads, config.head_dim)
    return tuple(PagedLayerCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.num_layers))


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class NewKV:
    """This step's keys and values of one layer [B,T,K,H], returned for the caller to write into
    its pages (see `engine.step`): a forward pass that only reads the pool lets XLA keep it in
    place, where gathering from and writing to one donated pool made it copy the whole pool."""

    k: Array
    v: Array


def _paged_view(
    cache: PagedLayerCache, k: Array, v: Array, positions: Array, block_tables: Array
) -> tuple[Array, Array]:
    """Every row's keys and values [B, M*page_size, K, H] in position order: its pages as they
    are, with this step's k/v [B,T,K,H] set at `positions`."""
    page_size = cache.k.shape[1]
    B, M = block_tables.shape
    rows = jnp.arange(B)[:, None]

    def view(pool: Array, new: Array) -> Array:
        return pool[block_tables].reshape(B, M * page_size, *pool.shape[2:]).at[rows, positions].set(new)

    return view(cache.k, k), view(cache.v, v)


def init_layer_caches(config: ModelConfig, batch: int, length: int, dtype: jnp.dtype) -> tuple[LayerCache, ...]:
    shape = (batch, length, config.num_kv_heads, config.head_dim)
    return tuple(LayerCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.num_layers))


def logical_param(
    module: nn.Module,
    name: str,
    shape: tuple[int, ...],
    axes: tuple[str, ...],
    dtype: jnp.dtype,
    init: nn.initializers.Initializer = nn.initializers.zeros,
) -> Array:
    """A parameter whose axes carry logical names (real values always come from a checkpoint)."""
    return cast(Array, module.param(name, nn.with_logical_partitioning(init, axes), shape, dtype))


def einsum(equation: str, *operands: Array, dtype: jnp.dtype) -> Array:
    return jnp.einsum(equation, *operands, preferred_element_type=jnp.float32).astype(dtype)


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

    @nn.compact
    def __call__(self, x: Array) -> Array:
        kernel = logical_param(self, "kernel", self.kernel_shape, self.kernel_axes, self.dtype)
        if self.merged > 1:
            flat_x = x.reshape(*x.shape[: -self.merged], -1)
            flat_kernel = kernel.reshape(-1, *kernel.shape[self.merged :])
            y = jnp.matmul(flat_x, flat_kernel, preferred_element_type=jnp.float32).astype(self.dtype)
        else:
            y = einsum(self.equation, x, kernel, dtype=self.dtype)
        if self.bias_axes is not None:
            bias_shape = self.kernel_shape[-len(self.bias_axes) :]
            bias = logical_param(self, "bias", bias_shape, self.bias_axes, self.dtype)
            y = y + bias
        return y


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

    def setup(self) -> None:
        self.embedding = logical_param(
            self, "embedding", (self.vocab_size, self.hidden_size), ("vocab", "embed"), self.dtype
        )

    def __call__(self, tokens: Array) -> Array:
        return jnp.take(self.embedding, tokens, axis=0)

    def attend(self, x: Array) -> Array:
        """Logits against the embedding matrix (tied output head)."""
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


def rope_frequencies(config: ModelConfig, positions: Array) -> tuple[Array, float]:
    """Inverse frequencies [R] and the cos/sin scale for a step at `positions`.

    Only dynamic NTK depends on the positions: like transformers, it stretches the base once the
    sequence outgrows `max_position_embeddings`.
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
        seq_len = jnp.maximum(jnp.max(positions) + 1, trained).astype(jnp.float32)
        stretched = base * ((s.factor * seq_len / trained) - (s.factor - 1)) ** (dim / (dim - 2))
        exponents = jnp.arange(0, dim, 2, dtype=jnp.float32) / dim
        return 1.0 / stretched**exponents, 1.0
    return jnp.asarray(_default_inv_freq(base, dim)), 1.0


def apply_rope(x: Array, positions: Array, inv_freq: Array, scale: float) -> Array:
    """Rotates x [B,T,*,H] by positions [B,T] (HF "rotate_half" layout: first half pairs with second)."""
    angles = jnp.einsum("BT,R->BTR", positions.astype(jnp.float32), inv_freq)
    cos = (jnp.cos(angles) * scale)[:, :, None, :]
    sin = (jnp.sin(angles) * scale)[:, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


# --- Blocks -------------------------------------------------------------------------------------


AnyCache = LayerCache | PagedLayerCache
# What a layer hands back: the updated contiguous cache, or (paged) the step's new keys and values.
CacheOut = LayerCache | NewKV


class Attention(nn.Module):
    """Grouped-query causal self-attention over `cache` when given.

    A contiguous cache is written at `positions` and returned. A paged cache (with the rows' block
    tables [B,M]) is only read; the step's keys and values come back as `NewKV`. A single-token
    query (decode) computes its scores as a broadcast multiply-and-sum: on XLA CPU that was ~4x
    faster than the batched einsum.
    """

    config: ModelConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(
        self, x: Array, positions: Array, cache: AnyCache | None, block_tables: Array | None = None
    ) -> tuple[Array, CacheOut | None]:
        c = self.config
        D, N, K, H, G = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.queries_per_kv_head
        bias_q = ("q_heads", "head_dim") if c.qkv_bias else None
        bias_kv = ("kv_heads", "head_dim") if c.qkv_bias else None
        q = Projection("BTD,DNH->BTNH", (D, N, H), ("embed", "q_heads", "head_dim"), bias_q, self.dtype, name="q")(x)
        k = Projection("BTD,DKH->BTKH", (D, K, H), ("embed", "kv_heads", "head_dim"), bias_kv, self.dtype, name="k")(x)
        v = Projection("BTD,DKH->BTKH", (D, K, H), ("embed", "kv_heads", "head_dim"), bias_kv, self.dtype, name="v")(x)
        if c.qk_norm:
            q = RMSNorm(H, c.rms_norm_eps, "head_dim", self.dtype, name="q_norm")(q)
            k = RMSNorm(H, c.rms_norm_eps, "head_dim", self.dtype, name="k_norm")(k)
        inv_freq, rope_scale = rope_frequencies(c, positions)
        q = apply_rope(q, positions, inv_freq, rope_scale)
        k = apply_rope(k, positions, inv_freq, rope_scale)

        returned_cache: CacheOut | None = None
        if cache is None:
            keys, values, key_positions = k, v, positions
        else:
            if isinstance(cache, PagedLayerCache):
                assert block_tables is not None, "a paged cache needs block tables"
                keys, values = _paged_view(cache, k, v, positions, block_tables)
                returned_cache = NewKV(k, v)
            else:
                rows = jnp.arange(x.shape[0])[:, None]
                returned_cache = LayerCache(cache.k.at[rows, positions].set(k), cache.v.at[rows, positions].set(v))
                keys, values = returned_cache.k, returned_cache.v
            key_positions = jnp.broadcast_to(jnp.arange(keys.shape[1]), (x.shape[0], keys.shape[1]))

        B, T = x.shape[:2]
        causal = key_positions[:, None, :] <= positions[:, :, None]  # [B, T, S]
        if T == 1:
            q1 = q.reshape(B, 1, K, G, H)[:, 0].astype(jnp.float32)
            scores = jnp.sum(q1[:, None] * keys.astype(jnp.float32)[:, :, :, None, :], axis=-1) / math.sqrt(H)
            scores = jnp.where(causal[:, 0, :, None, None], scores, _MASKED)  # [B, S, K, G]
            probs = jax.nn.softmax(scores, axis=1)
            attended = jnp.sum(probs[..., None] * values.astype(jnp.float32)[:, :, :, None, :], axis=1)
            out = attended.astype(self.dtype).reshape(B, T, N, H)
        else:
            q = q.reshape(B, T, K, G, H)
            scores = jnp.einsum("BTKGH,BSKH->BKGTS", q, keys, preferred_element_type=jnp.float32) / math.sqrt(H)
            scores = jnp.where(causal[:, None, None], scores, _MASKED)
            probs = jax.nn.softmax(scores, axis=-1).astype(self.dtype)
            out = einsum("BKGTS,BSKH->BTKGH", probs, values, dtype=self.dtype).reshape(B, T, N, H)
        o_bias = ("embed",) if c.o_bias else None
        o = Projection(
            "BTNH,NHD->BTD", (N, H, D), ("q_heads", "head_dim", "embed"), o_bias, self.dtype, merged=2, name="o"
        )
        return o(out), returned_cache


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    hidden_size: int
    intermediate_size: int
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        D, F = self.hidden_size, self.intermediate_size
        gate = Projection("BTD,DF->BTF", (D, F), ("embed", "ffn"), dtype=self.dtype, name="gate")(x)
        up = Projection("BTD,DF->BTF", (D, F), ("embed", "ffn"), dtype=self.dtype, name="up")(x)
        return Projection("BTF,FD->BTD", (F, D), ("ffn", "embed"), dtype=self.dtype, name="down")(nn.silu(gate) * up)


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
        self, x: Array, positions: Array, cache: AnyCache | None, block_tables: Array | None = None
    ) -> tuple[Array, CacheOut | None]:
        c = self.config
        attended, cache_out = Attention(c, self.dtype, name="attn")(
            RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="attn_norm")(x),
            positions,
            cache,
            block_tables,
        )
        x = x + attended
        normed = RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="mlp_norm")(x)
        mlp: nn.Module = (
            MoE(c, self.dtype, name="moe")
            if self.sparse_mlp
            else GatedMLP(c.hidden_size, c.intermediate_size, self.dtype, name="mlp")
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
        embed = Embedding(c.vocab_size, c.hidden_size, self.dtype, name="embed")
        x = embed(tokens)
        new_caches = []
        for i in range(c.num_layers):
            x, layer_cache = DecoderLayer(c, c.is_moe_layer(i), self.dtype, name=f"layer_{i}")(
                x, positions, None if caches is None else caches[i], block_tables
            )
            new_caches.append(layer_cache)
        if logits_at is not None:
            x = x[jnp.arange(x.shape[0]), logits_at][:, None]
        x = RMSNorm(c.hidden_size, c.rms_norm_eps, "embed", self.dtype, name="final_norm")(x)
        if c.tie_word_embeddings:
            logits = embed.attend(x)
        else:
            lm_head = logical_param(self, "lm_head", (c.hidden_size, c.vocab_size), ("embed", "vocab"), self.dtype)
            logits = einsum("BTD,DV->BTV", x, lm_head, dtype=jnp.float32)
        if caches is None:
            return logits, None
        return logits, tuple(cast(CacheOut, layer_cache) for layer_cache in new_caches)
