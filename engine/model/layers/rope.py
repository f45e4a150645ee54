"""Rotary position embedding: frequencies as in transformers' modeling_rope_utils, and rotation."""

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from engine.model.model_config import ModelConfig, RopeScaling

Array = jax.Array


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


def rope_rotation(
    config: ModelConfig, positions: Array, real: Array | None = None, rope_positions: Array | None = None
) -> Rotation:
    """The rotation of a step at `positions` [B,T] (`real` as for `rope_frequencies`), computed once
    for every layer.

    `rope_positions` turn tokens by other positions than their places in the sequence (M-RoPE,
    Qwen2-VL): [B,T] one each, or [B,T,3] a (time, row, column) triple whose parts turn the
    frequency sections of `config.mrope_section`. A text token's three are equal, so [B,T] serves
    text (shifted past the images before it)."""
    inv_freq, scale = rope_frequencies(config, positions, real)
    per_row = inv_freq if inv_freq.ndim == 2 else inv_freq[None]
    turned = positions if rope_positions is None else rope_positions
    if turned.ndim == 3:
        section_of = np.repeat(np.arange(len(config.mrope_section)), config.mrope_section)
        per_frequency = turned[:, :, section_of].astype(jnp.float32)  # [B,T,R]
        angles = per_frequency * per_row[:, None, :]
    else:
        angles = turned.astype(jnp.float32)[:, :, None] * per_row[:, None, :]

    def rotation() -> tuple[Array, Array]:
        return jnp.cos(angles) * scale, jnp.sin(angles) * scale

    def materialized() -> tuple[Array, Array]:
        # XLA's CPU fusion would put the cosine and sine into every rotation, computing them again
        # for each element of each head. A conditional's results are buffers it cannot fuse into
        # (an optimization barrier is gone before fusion on CPU); both branches are one, the
        # predicate only unknown to XLA.
        return jax.lax.cond(positions[0, 0] >= 0, rotation, rotation)

    cos, sin = jax.lax.platform_dependent(cpu=materialized, default=rotation)
    return Rotation(cos[:, :, None, :], sin[:, :, None, :])


def apply_rope(x: Array, rotation: Rotation) -> Array:
    """Rotates x [B,T,*,H] (HF "rotate_half" layout: first half pairs with second)."""
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    cos, sin = rotation.cos, rotation.sin
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)
