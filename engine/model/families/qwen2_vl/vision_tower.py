"""The Qwen2-VL / Qwen2.5-VL vision tower: patches of an image → embeddings in the decoder's width.

A tower is a ViT over 14-pixel patches (two frames deep, one image repeated) with a 2D rotary
embedding (a patch's row and column each rotate a quarter of a head), then a merger that folds
each 2×2 block of patches into one decoder token. Qwen2.5-VL's blocks attend within windows of
patches except a few full-attention blocks, with RMSNorm and a gated MLP; Qwen2-VL's attend over
the whole image with LayerNorm and a QuickGELU MLP.

Everything that depends on an image's size is worked out on the host (`tower_inputs`): the patch
order that makes each window contiguous, each patch's row and column, the segments a patch may
attend within and the order the merged tokens go back to. The device function then sees only
padded arrays of a bucket's size, so images of any size share a few compiled shapes. Attention
is a masked dense product over the bucket's patches (a patch attends to those of its segment).

`VisionConfig` (HF `vision_config`) is what the decoder and the runner hold of the tower: the
`ImageTower` of engine/model/image_tower.py.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from engine.model.image_tower import TowerImage
from engine.model.layers.linear import dot_precision, logical_param

Array = jax.Array

# Patches of padding get this segment: they attend only to each other (a windowed block's padding
# patch, to those within its chunk's reach: padding's outputs are never read).
_PADDING_SEGMENT = -1
# Queries a block attends at once; the tower's compiled sizes are multiples of it.
QUERY_CHUNK = 256


@dataclass(frozen=True)
class VisionConfig:
    """A vision tower's hyper-parameters (HF `vision_config`), for either generation."""

    generation: str  # "qwen2_vl" or "qwen2_5_vl"
    depth: int
    width: int  # the tower's hidden size
    heads: int
    mlp_size: int
    out_size: int  # the decoder's hidden size
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    in_channels: int = 3
    window_size: int = 112  # pixels (Qwen2.5-VL)
    full_attention_blocks: tuple[int, ...] = ()  # Qwen2.5-VL; every block in Qwen2-VL
    rope_theta: float = 10000.0

    @classmethod
    def from_hf(cls, d: dict[str, Any], generation: str, decoder_width: int) -> "VisionConfig":
        common: dict[str, Any] = {
            "generation": generation,
            "depth": int(d["depth"]),
            "heads": int(d["num_heads"]),
            "patch_size": int(d.get("patch_size", 14)),
            "temporal_patch_size": int(d.get("temporal_patch_size", 2)),
            "merge_size": int(d.get("spatial_merge_size", 2)),
            "in_channels": int(d.get("in_channels", d.get("in_chans", 3))),
            "rope_theta": float((d.get("rope_parameters") or {}).get("rope_theta", 10000.0)),
        }
        if generation == "qwen2_vl":
            width = int(d["embed_dim"])
            return cls(
                **common,
                width=width,
                mlp_size=int(width * float(d.get("mlp_ratio", 4))),
                out_size=int(d.get("hidden_size", decoder_width)),
                full_attention_blocks=tuple(range(int(d["depth"]))),
            )
        return cls(
            **common,
            width=int(d["hidden_size"]),
            mlp_size=int(d["intermediate_size"]),
            out_size=int(d.get("out_hidden_size", decoder_width)),
            window_size=int(d.get("window_size", 112)),
            full_attention_blocks=tuple(int(i) for i in d.get("fullatt_block_indexes", ())),
        )

    @property
    def patch_inputs(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def merge_unit(self) -> int:
        return self.merge_size**2

    @property
    def window_patches(self) -> int:
        """The most patches a window holds (Qwen2.5-VL's windowed blocks)."""
        return (self.window_size // self.patch_size) ** 2

    # --- engine/model/image_tower.py's ImageTower -------------------------------------------

    @property
    def patch_multiple(self) -> int:
        return QUERY_CHUNK

    def module(self, dtype: Any, name: str | None = None) -> nn.Module:
        return VisionTower(self, dtype, name=name)

    def inputs(self, images: Sequence[TowerImage], bucket: int) -> "TowerInputs":
        return tower_inputs(self, images, bucket)

    def blank_inputs(self, bucket: int) -> "TowerInputs":
        grid = (1, self.merge_size, bucket // self.merge_size)
        return tower_inputs(self, [(np.zeros((bucket, self.patch_inputs), np.float32), grid)], bucket)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class TowerInputs:
    """One tower call's inputs for a bucket of `patches` rows (window order, padding at the end)."""

    patches: Array  # [P, patch_inputs]
    rows: Array  # i32[P] each patch's row in its image
    columns: Array  # i32[P]
    image_segments: Array  # i32[P] full attention: a patch attends within its image
    window_segments: Array  # i32[P] windowed attention: within its window
    merged_order: Array  # i32[P / merge_unit] the merged tokens back in the processor's order


def tower_inputs(config: VisionConfig, images: Sequence[TowerImage], bucket: int) -> TowerInputs:
    """The host's part of a tower call over `images` (each its processor patches and grid),
    padded to `bucket` patches. The merged tokens come back image after image."""
    unit = config.merge_unit
    patches = np.zeros((bucket, config.patch_inputs), np.float32)
    rows = np.zeros(bucket, np.int32)
    columns = np.zeros(bucket, np.int32)
    image_segments = np.full(bucket, _PADDING_SEGMENT, np.int32)
    window_segments = np.full(bucket, _PADDING_SEGMENT, np.int32)
    merged_order = np.arange(bucket // unit, dtype=np.int32)
    start, windows = 0, 0
    for index, (image_patches, grid) in enumerate(images):
        count = math.prod(grid)
        order, sizes = _window_order(config, grid)
        # `order` permutes merge units; each unit's patches stay together.
        patch_order = (order[:, None] * unit + np.arange(unit)[None, :]).reshape(-1)
        at = slice(start, start + count)
        patches[at] = image_patches[patch_order]
        image_rows, image_columns = _patch_rows_columns(grid, config.merge_size)
        rows[at], columns[at] = image_rows[patch_order], image_columns[patch_order]
        image_segments[at] = index
        window_segments[at] = windows + np.repeat(np.arange(len(sizes)), sizes)
        windows += len(sizes)
        first = start // unit
        merged_order[first : first + count // unit] = first + np.argsort(order)
        start += count
    return TowerInputs(
        jnp.asarray(patches),
        jnp.asarray(rows),
        jnp.asarray(columns),
        jnp.asarray(image_segments),
        jnp.asarray(window_segments),
        jnp.asarray(merged_order),
    )


def _patch_rows_columns(grid: tuple[int, int, int], merge: int) -> tuple[np.ndarray, np.ndarray]:
    """Each patch's row and column, in the processor's order (merge blocks, row-major within)."""
    t, h, w = grid
    hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    block = (h // merge, merge, w // merge, merge)
    rows = hh.reshape(block).transpose(0, 2, 1, 3).reshape(-1)
    columns = ww.reshape(block).transpose(0, 2, 1, 3).reshape(-1)
    return np.tile(rows, t).astype(np.int32), np.tile(columns, t).astype(np.int32)


def _window_order(config: VisionConfig, grid: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The merge units' order that makes each attention window contiguous, and the windows' sizes
    in patches. Qwen2-VL has no windows: one window, the image, in its own order."""
    t, h, w = grid
    merged_h, merged_w = h // config.merge_size, w // config.merge_size
    units = t * merged_h * merged_w
    if config.generation == "qwen2_vl":
        return np.arange(units), np.array([units * config.merge_unit])
    side = config.window_size // config.merge_size // config.patch_size
    padded_h, padded_w = -(-merged_h // side) * side, -(-merged_w // side) * side
    index = np.full((t, padded_h, padded_w), -1)
    index[:, :merged_h, :merged_w] = np.arange(units).reshape(t, merged_h, merged_w)
    tiles = index.reshape(t, padded_h // side, side, padded_w // side, side).transpose(0, 1, 3, 2, 4)
    tiles = tiles.reshape(-1, side * side)
    sizes = (tiles >= 0).sum(axis=1)
    order = tiles[tiles >= 0]
    return order, sizes[sizes > 0] * config.merge_unit


class _Norm(nn.Module):
    """RMSNorm (Qwen2.5-VL) or LayerNorm (Qwen2-VL), eps 1e-6, in float32."""

    size: int
    layer_norm: bool
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = logical_param(self, "scale", (self.size,), (None,), self.dtype, nn.initializers.ones)
        x32 = x.astype(jnp.float32)
        if self.layer_norm:
            bias = logical_param(self, "bias", (self.size,), (None,), self.dtype)
            centred = x32 - x32.mean(-1, keepdims=True)
            normed = centred * jax.lax.rsqrt((centred * centred).mean(-1, keepdims=True) + 1e-6)
            return (normed * scale + bias).astype(self.dtype)
        normed = x32 * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + 1e-6)
        return scale * normed.astype(self.dtype)


class _Dense(nn.Module):
    """x @ kernel + bias, accumulated in float32."""

    inputs: int
    outputs: int
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: Array) -> Array:
        kernel = logical_param(self, "kernel", (self.inputs, self.outputs), (None, None), self.dtype)
        bias = logical_param(self, "bias", (self.outputs,), (None,), self.dtype)
        y = jnp.matmul(x, kernel, preferred_element_type=jnp.float32, precision=dot_precision(x, kernel))
        return (y + bias).astype(self.dtype)


def _attention(q: Array, k: Array, v: Array, segments: Array, key_span: int | None, query_chunk: int) -> Array:
    """Each patch's attention [P, heads, H] over the patches of its segment, `query_chunk` queries
    at a time: the scores held at once are [heads, query_chunk, keys], not [heads, P, P] (1.6 GB
    at 5,120 patches of 16 heads). A windowed block's chunk reads only the `key_span` keys around
    it, which hold every window its queries are in (windows are contiguous and at most
    `window_patches` long), so its cost grows with P, not P²."""
    P, heads, H = q.shape
    chunk = query_chunk if P % query_chunk == 0 else P
    span = P if key_span is None else min(P, chunk + 2 * key_span)
    precision = dot_precision(q, k)

    def queries(start: Array) -> Array:
        first_key = jnp.clip(start - (span - chunk) // 2, 0, P - span)
        q_chunk = jax.lax.dynamic_slice_in_dim(q, start, chunk)
        k_span, v_span = (jax.lax.dynamic_slice_in_dim(x, first_key, span) for x in (k, v))
        scores = jnp.einsum("qnh,knh->nqk", q_chunk, k_span, preferred_element_type=jnp.float32, precision=precision)
        scores = scores / math.sqrt(H)
        query_segments = jax.lax.dynamic_slice_in_dim(segments, start, chunk)
        allowed = query_segments[:, None] == jax.lax.dynamic_slice_in_dim(segments, first_key, span)[None, :]
        weights = jax.nn.softmax(jnp.where(allowed[None], scores, -jnp.inf), axis=-1).astype(q.dtype)
        return jnp.einsum("nqk,knh->qnh", weights, v_span, preferred_element_type=jnp.float32, precision=precision)

    return jax.lax.map(queries, jnp.arange(0, P, chunk)).reshape(P, heads, H)


def _rotate(x: Array, cos: Array, sin: Array) -> Array:
    """x [P, heads, H] rotated "rotate_half" style by cos, sin [P, 1, H]."""
    x32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return (x32 * cos + rotated * sin).astype(x.dtype)


class _Block(nn.Module):
    config: VisionConfig
    dtype: jnp.dtype
    query_chunk: int
    key_span: int | None  # windowed blocks: the keys a chunk of queries can reach; None: all

    @nn.compact
    def __call__(self, x: Array, cos: Array, sin: Array, segments: Array) -> Array:
        c = self.config
        layer_norm = c.generation == "qwen2_vl"
        P, heads, H = x.shape[0], c.heads, c.width // c.heads
        qkv = _Dense(c.width, 3 * c.width, self.dtype, name="qkv")(
            _Norm(c.width, layer_norm, self.dtype, name="norm1")(x)
        )
        q, k, v = jnp.moveaxis(qkv.reshape(P, 3, heads, H), 1, 0)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        attended = _attention(q, k, v, segments, self.key_span, self.query_chunk)
        x = x + _Dense(c.width, c.width, self.dtype, name="proj")(attended.reshape(P, c.width).astype(self.dtype))
        normed = _Norm(c.width, layer_norm, self.dtype, name="norm2")(x)
        if layer_norm:
            hidden = _Dense(c.width, c.mlp_size, self.dtype, name="fc1")(normed).astype(jnp.float32)
            hidden = hidden * jax.nn.sigmoid(1.702 * hidden)  # QuickGELU
            return x + _Dense(c.mlp_size, c.width, self.dtype, name="fc2")(hidden.astype(self.dtype))
        gate = _Dense(c.width, c.mlp_size, self.dtype, name="gate")(normed).astype(jnp.float32)
        up = _Dense(c.width, c.mlp_size, self.dtype, name="up")(normed).astype(jnp.float32)
        gated = (jax.nn.silu(gate) * up).astype(self.dtype)
        return x + _Dense(c.mlp_size, c.width, self.dtype, name="down")(gated)


class VisionTower(nn.Module):
    """TowerInputs → merged embeddings [P / merge_unit, out_size] in the processor's order."""

    config: VisionConfig
    dtype: jnp.dtype = jnp.float32
    # Queries attended at once (`_attention`); a bucket that is no multiple of it attends all at once.
    query_chunk: int = QUERY_CHUNK

    @nn.compact
    def __call__(self, inputs: TowerInputs) -> Array:
        c = self.config
        patch_kernel = logical_param(self, "patch_embed", (c.patch_inputs, c.width), (None, None), self.dtype)
        patches = inputs.patches.astype(self.dtype)
        x = jnp.matmul(
            patches, patch_kernel, preferred_element_type=jnp.float32, precision=dot_precision(patches, patch_kernel)
        ).astype(self.dtype)
        cos, sin = self._rotation(inputs.rows, inputs.columns)
        for i in range(c.depth):
            full = i in c.full_attention_blocks
            segments = inputs.image_segments if full else inputs.window_segments
            span = None if full else c.window_patches
            x = _Block(c, self.dtype, self.query_chunk, span, name=f"block_{i}")(x, cos, sin, segments)
        merged_width = c.width * c.merge_unit
        layer_norm = c.generation == "qwen2_vl"
        merged = _Norm(c.width, layer_norm, self.dtype, name="merger_norm")(x).reshape(-1, merged_width)
        hidden = _Dense(merged_width, merged_width, self.dtype, name="merger_in")(merged)
        hidden = jax.nn.gelu(hidden.astype(jnp.float32), approximate=False).astype(self.dtype)
        out = _Dense(merged_width, c.out_size, self.dtype, name="merger_out")(hidden)
        return out[inputs.merged_order]

    def _rotation(self, rows: Array, columns: Array) -> tuple[Array, Array]:
        """cos, sin [P, 1, H]: a head's first quarter turns with the row, its second with the column
        (then both again, "rotate_half" pairs each with its copy)."""
        H = self.config.width // self.config.heads
        spatial = H // 2
        inv_freq = 1.0 / self.config.rope_theta ** (np.arange(0, spatial, 2, dtype=np.float32) / spatial)
        angles = jnp.concatenate(
            [rows[:, None].astype(jnp.float32) * inv_freq, columns[:, None].astype(jnp.float32) * inv_freq], axis=-1
        )
        angles = jnp.concatenate([angles, angles], axis=-1)[:, None, :]
        return jnp.cos(angles), jnp.sin(angles)
