"""4-bit weights for `--quantization w4a8`: llama.cpp's Q4_1 blocks, the GGUF's own where it has them.

Why: a one-token decode step streams every weight once, so fewer bytes per weight make a
shorter step: Q4_1 takes 5 bits per weight against int8's 8 (and float32's 32).

Format: an output-major weight [N, K] in blocks of `BLOCK` inputs, each with an f16 scale d and
minimum m and 4-bit codes c in 0..15, standing for d · c + m. From a GGUF that is Q4_1 already, `pack`
finds the file's own blocks again (each block's smallest and largest values are its codes 0 and 15),
so serving adds no weight error; other weights are quantized the same way (llama.cpp's reference
Q4_1). 5 bits per weight.

Layout: one uint8 array per weight, [..., N, K/BLOCK · BLOCK_BYTES] (each channel's share: 16 bytes
of codes, an f16 scale and an f16 minimum per block), so that a weight is one argument of a jitted
step (a decode step's dispatch costs per argument). The native kernel computes `GROUP` output
channels side by side, one per 32-bit lane, so each group of 8 channels (along the last output axis)
keeps its bytes interleaved, block after block: 4 steps of 8 inputs, each 32 bytes holding 4 bytes
per channel (input j of the 8 in the low nibble of byte j and input j + 4 in the high nibble: one
shift and mask give the first 4 and the last 4 inputs of all 8 channels), then the 8 channels' f16
scales and their 8 f16 minimums (in the machine's byte order). A group's 8 rows of the array hold
its bytes in that order, so splitting the output channels (at multiples of `GROUP`) splits the
weight.

Two paths compute with these weights (engine/model/int8.py picks one):
- on the CPU, prompts and decode steps alike: the native kernel (engine/model/kernels/q4_matmul.cc)
  against activations quantized per block of 32 (llama.cpp's Q8 blocks): the integer dot per
  block, scaled in float. One function for every step: a token's result never depends on the
  step it is in.
- other platforms, or no C++ compiler: XLA's int8 dot, the weights expanded and rounded to int8 per
  output channel for the call (`int8.Weight.int8`), as `--quantization w8a8` computes. That
  rounding runs again in every call, a cost per prompt chunk the CPU avoids by running prompts on
  the kernel too.
"""

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

BLOCK = 32
GROUP = 8  # output channels interleaved, one per lane of the kernel's vectors
STEP = 8  # inputs per 4 bytes of a channel's codes
LEVELS = 15  # codes 0..15
BLOCK_BYTES = BLOCK // 2 + 2 + 2  # one channel's codes, scale and minimum of one block


def packable(channels: int, depth: int) -> bool:
    """Whether a weight with `channels` along its last output axis and `depth` inputs can be packed."""
    return channels % GROUP == 0 and depth % BLOCK == 0


def packed_bytes(depth: int) -> int:
    """Bytes per output channel of a packed weight with `depth` inputs."""
    return depth // BLOCK * BLOCK_BYTES


def pack(weights: Array) -> Array:
    """Output-major float weights [..., N, K] → uint8 [..., N, packed_bytes(K)] in the layout above."""
    blocks = weights.astype(jnp.float32).reshape(*weights.shape[:-1], -1, BLOCK)
    low = blocks.min(axis=-1)
    scales = ((blocks.max(axis=-1) - low) / LEVELS).astype(jnp.float16)
    mins = low.astype(jnp.float16)
    step = scales.astype(jnp.float32)
    step = jnp.where(step == 0, 1.0, step)
    levels = jnp.clip(jnp.round((blocks - mins[..., None].astype(jnp.float32)) / step[..., None]), 0, LEVELS)
    *lead, n, k = weights.shape
    groups, count = n // GROUP, k // BLOCK
    # [..., g, c, b, s, half, j] → bytes [..., g, b, s, c, j]: input j of the step low, j + 4 high.
    levels = levels.astype(jnp.uint8).reshape(*lead, groups, GROUP, count, BLOCK // STEP, 2, STEP // 2)
    codes = levels[..., 0, :] | (levels[..., 1, :] << 4)
    codes = jnp.moveaxis(codes, -4, -2).reshape(*lead, groups, count, -1)

    def group_major(values: Array) -> Array:  # f16 [..., N, B] → bytes [..., g, b, c · 2]
        as_bytes = jax.lax.bitcast_convert_type(values, jnp.uint8).reshape(*lead, groups, GROUP, count, 2)
        return jnp.swapaxes(as_bytes, -3, -2).reshape(*lead, groups, count, -1)

    stored = jnp.concatenate([codes, group_major(scales), group_major(mins)], axis=-1)
    return stored.reshape(*lead, n, packed_bytes(k))


def from_q4_1_rows(rows: np.ndarray) -> np.ndarray:
    """A GGUF's Q4_1 rows, uint8 [N, K/BLOCK · 20] (each block an f16 scale, an f16 minimum and 16
    bytes of codes: input j in the low nibble of byte j, input j + 16 in the high one) → the layout
    `pack` gives their floats: the same codes, scales and minimums, only moved (numpy, no rounding)."""
    n, size = rows.shape
    groups, count = n // GROUP, size // BLOCK_BYTES
    blocks = rows.reshape(groups, GROUP, count, BLOCK_BYTES)
    scales, mins, file_codes = blocks[..., 0:2], blocks[..., 2:4], blocks[..., 4:]
    levels = np.concatenate([file_codes & 0x0F, file_codes >> 4], axis=-1)  # [g, c, b, inputs in order]
    levels = levels.reshape(groups, GROUP, count, BLOCK // STEP, 2, STEP // 2)
    codes = levels[..., 0, :] | (levels[..., 1, :] << 4)  # [g, c, b, s, j]
    codes = np.moveaxis(codes, 1, 3).reshape(groups, count, -1)  # [g, b, s, c, j]

    def group_major(values: np.ndarray) -> np.ndarray:  # f16 bytes [g, c, b, 2] → [g, b, c · 2]
        return np.swapaxes(values, 1, 2).reshape(groups, count, -1)

    stored = np.concatenate([codes, group_major(scales), group_major(mins)], axis=-1)
    return stored.reshape(n, packed_bytes(count * BLOCK))


def fields(packed: Array) -> tuple[Array, Array, Array]:
    """A weight as `pack` returns it → its codes uint8 [..., N, K/BLOCK, BLOCK] (inputs in order),
    and its scales and minimums f16 [..., N, K/BLOCK]."""
    *lead, n, size = packed.shape
    groups, count = n // GROUP, size // BLOCK_BYTES
    stored = packed.reshape(*lead, groups, count, GROUP * BLOCK_BYTES)
    code_bytes = GROUP * BLOCK // 2
    codes = stored[..., :code_bytes].reshape(*lead, groups, count, BLOCK // STEP, GROUP, STEP // 2)
    codes = jnp.moveaxis(codes, -2, -4)  # [..., g, c, b, s, j]
    levels = jnp.stack([codes & 0x0F, codes >> 4], axis=-2).reshape(*lead, n, count, BLOCK)

    def per_channel(values: Array) -> Array:  # bytes [..., g, b, c · 2] → f16 [..., N, B]
        halves = jax.lax.bitcast_convert_type(values.reshape(*lead, groups, count, GROUP, 2), jnp.float16)
        return jnp.swapaxes(halves, -1, -2).reshape(*lead, n, count)

    return (
        levels,
        per_channel(stored[..., code_bytes : code_bytes + 2 * GROUP]),
        per_channel(stored[..., code_bytes + 2 * GROUP :]),
    )


def unpack(packed: Array) -> Array:
    """A weight as `pack` returns it → the f32 weights [..., N, K] it stands for."""
    levels, scales, mins = fields(packed)
    d, m = (a.astype(jnp.float32)[..., None] for a in (scales, mins))
    return (levels.astype(jnp.float32) * d + m).reshape(*packed.shape[:-1], -1)
