"""4-bit weights for `--quantization w4a8`: llama.cpp's Q4_1 blocks, the GGUF's own where it has them.

Why: a one-token decode step streams every weight once. In Q4_1 the default model's projections
are ~66 MB instead of 106 MB in int8: a decode step reads ~95 MB with the output head in int8,
against 135 MB (and 540 MB in float32).

Format: an output-major weight [N, K] in blocks of `BLOCK` inputs, each with an f16 scale d and
minimum m and 4-bit codes c in 0..15, standing for d · c + m. From a GGUF that is Q4_1 already, `pack`
finds the file's own blocks again (each block's smallest and largest values are its codes 0 and 15),
so serving adds no weight error; other weights are quantized the same way (llama.cpp's reference
Q4_1). 5 bits per weight.

Layout: the native kernel computes `GROUP` output channels side by side, one per 32-bit lane, so
each group of 8 channels (along the last output axis) keeps its codes, scales and minimums
interleaved: for every 8 inputs, 32 bytes hold 4 bytes per channel, input j of the 8 in the low
nibble of byte j and input j + 4 in the high nibble of byte j (one shift and mask give the first 4
and the last 4 inputs of all 8 channels); for every block, the group's 8 scales (and 8 minimums)
are adjacent. The arrays keep their logical shapes, [..., N, K/2] and [..., N, K/BLOCK], in bytes
arranged group by group, so splitting the output channels (at multiples of `GROUP`) splits them.

Two paths compute with these weights (engine/int8.py picks one):
- on the CPU, prompts and decode steps alike: the native kernel (engine/kernels/q4_matmul.cc)
  against activations quantized per block of 32 (llama.cpp's Q8 blocks): the integer dot per
  block, scaled in float. One function for every step: a token's result never depends on the
  step it is in.
- other platforms, or no C++ compiler: XLA's int8 dot, the weights expanded and rounded to int8 per
  output channel for the call (`int8.Weight.int8_values`), as `--quantization w8a8` computes.
  (That rounding runs on every prompt chunk: ~0.3 s of CPU time per chunk of the default model on
  2 AMD Zen 3 cores, by jax.profiler; the CPU runs prompts on the kernel instead.)
"""

import jax
import jax.numpy as jnp

Array = jax.Array

BLOCK = 32
GROUP = 8  # output channels interleaved, one per lane of the kernel's vectors
STEP = 8  # inputs per 4 bytes of a channel's codes
LEVELS = 15  # codes 0..15


def packable(channels: int, depth: int) -> bool:
    """Whether a weight with `channels` along its last output axis and `depth` inputs can be packed."""
    return channels % GROUP == 0 and depth % BLOCK == 0


def pack(weights: Array) -> tuple[Array, Array, Array]:
    """Output-major float weights [..., N, K] → (codes uint8 [..., N, K/2], scales f16 [..., N,
    K/BLOCK], mins f16 [..., N, K/BLOCK]) in the interleaved layout above."""
    blocks = weights.astype(jnp.float32).reshape(*weights.shape[:-1], -1, BLOCK)
    low = blocks.min(axis=-1)
    scales = ((blocks.max(axis=-1) - low) / LEVELS).astype(jnp.float16)
    mins = low.astype(jnp.float16)
    step = scales.astype(jnp.float32)
    step = jnp.where(step == 0, 1.0, step)
    codes = jnp.clip(jnp.round((blocks - mins[..., None].astype(jnp.float32)) / step[..., None]), 0, LEVELS)
    # [..., g, c, s, half, j] → bytes [..., g, s, c, j]: input j of the step low, j + 4 high.
    *lead, n, k = weights.shape
    codes = codes.astype(jnp.uint8).reshape(*lead, n // GROUP, GROUP, k // STEP, 2, STEP // 2)
    packed = codes[..., 0, :] | (codes[..., 1, :] << 4)
    packed = jnp.swapaxes(packed, -2, -3).reshape(*lead, n, k // 2)
    return packed, _interleaved(scales), _interleaved(mins)


def unpack(codes: Array, scales: Array, mins: Array) -> Array:
    """(codes, scales, mins) as `pack` returns them → the f32 weights [..., N, K] they stand for."""
    *lead, n, half = codes.shape
    k = 2 * half
    steps = jnp.swapaxes(codes.reshape(*lead, n // GROUP, k // STEP, GROUP, STEP // 2), -2, -3)
    levels = jnp.stack([steps & 0x0F, steps >> 4], axis=-2).reshape(*lead, n, -1, BLOCK).astype(jnp.float32)
    d, m = (_deinterleaved(a).astype(jnp.float32)[..., None] for a in (scales, mins))
    return (levels * d + m).reshape(*lead, n, k)


def _interleaved(per_block: Array) -> Array:
    """[..., N, B] → the same shape, each group's B blocks of GROUP values adjacent."""
    return _swap_in_groups(per_block, (GROUP, per_block.shape[-1]))


def _deinterleaved(stored: Array) -> Array:
    """`_interleaved`'s inverse."""
    return _swap_in_groups(stored, (stored.shape[-1], GROUP))


def _swap_in_groups(values: Array, group_shape: tuple[int, int]) -> Array:
    """[..., N, B] seen as groups of `group_shape`, each transposed, back to [..., N, B]."""
    *lead, n, blocks = values.shape
    grouped = values.reshape(*lead, n // GROUP, *group_shape)
    return jnp.swapaxes(grouped, -1, -2).reshape(*lead, n, blocks)
