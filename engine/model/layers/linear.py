"""Parameters with logical axis names, and the projections built on them (float, int8, Q4 or GGUF
block weights)."""

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from engine.model import gguf_weights, int4, int8, kernels
from engine.model.gguf_weights import BlockWeight

if TYPE_CHECKING:
    from engine.model.layers.lora import LoraRows

Array = jax.Array


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


def dot_precision(*operands: Array) -> jax.lax.Precision:
    """HIGHEST where an operand is float32, so that float32 computes in float32 on every backend:
    XLA's default precision runs float32 dots as TF32 on NVIDIA GPUs (logits 4e-3 from the goldens
    on an H200) and as bfloat16 passes on TPUs. DEFAULT otherwise: bfloat16's products are exact
    in the float32 accumulator every dot here asks for."""
    wide = any(jnp.dtype(operand.dtype) == jnp.float32 for operand in operands)
    return jax.lax.Precision.HIGHEST if wide else jax.lax.Precision.DEFAULT


def einsum(equation: str, *operands: Array, dtype: jnp.dtype) -> Array:
    # Three or more operands contract through float32 intermediates: HIGHEST for all their dots.
    precision = dot_precision(*operands) if len(operands) < 3 else jax.lax.Precision.HIGHEST
    return jnp.einsum(equation, *operands, preferred_element_type=jnp.float32, precision=precision).astype(dtype)


def float_matmuls(x: Array, weights: Sequence[Array], contracting: int = 1) -> list[Array]:
    """x's last `contracting` axes times each float weight's first `contracting` axes, as one flat
    axis → f32, each with its weight's remaining axes.

    f32 weights on a CPU with the native kernels take one call whose rows never depend on each
    other (engine/model/kernels/f32_matmul.cc): a prompt's numbers then do not depend on how it was split
    into chunks or cached, nor a decode step's on the streams beside it, so seeded and greedy
    requests are reproducible. Elsewhere XLA's dot, whose sums may be ordered by the number of
    rows."""
    rows = x.reshape(-1, math.prod(x.shape[x.ndim - contracting :]))
    flat = [weight.reshape(rows.shape[1], -1) for weight in weights]

    def xla(rows: Array, flat: list[Array]) -> list[Array]:
        return [
            jnp.matmul(rows, weight, preferred_element_type=jnp.float32, precision=dot_precision(rows, weight))
            for weight in flat
        ]

    def native(rows: Array, flat: list[Array]) -> list[Array]:
        return kernels.f32_matmul(rows, flat)

    f32 = rows.dtype == jnp.float32 and all(weight.dtype == jnp.float32 for weight in flat)
    if f32 and kernels.available():
        ys = jax.lax.platform_dependent(rows, flat, cpu=native, default=xla)
    else:
        ys = xla(rows, flat)
    lead = x.shape[: x.ndim - contracting]
    return [y.reshape(*lead, *weight.shape[contracting:]) for y, weight in zip(ys, weights, strict=True)]


def quantized_param(
    module: nn.Module,
    name: str,
    channels: tuple[int, ...],
    channel_axes: tuple[str, ...],
    inputs: tuple[int, ...],
    input_axes: tuple[str, ...],
    weights: str,
) -> int8.Weight | BlockWeight:
    """An output-major int8 weight `name` ([*channels, *inputs]) with its `name_scale` per output
    channel; as "int4" (where engine/model/int4.py can pack it) one uint8 array `name` of Q4_1 blocks over the
    inputs as one flat axis, whose input axis is never split across devices (its bytes interleave
    groups of channels), its channels are; as a GGUF block format (engine/model/gguf_weights.py) one
    uint8 array of the file's rows, [*channels, row bytes], split the same way."""
    depth = math.prod(inputs)
    if weights in gguf_weights.FORMATS:
        shape = (*channels, gguf_weights.row_bytes(weights, depth))
        return BlockWeight(logical_param(module, name, shape, (*channel_axes, None), jnp.uint8), weights)
    if weights == "int4" and int4.packable(channels[-1], depth):
        packed = (*channels, int4.packed_bytes(depth))
        return int8.Weight(logical_param(module, name, packed, (*channel_axes, None), jnp.uint8))
    scale = logical_param(module, f"{name}_scale", channels, channel_axes, jnp.float32)
    values = logical_param(module, name, (*channels, *inputs), (*channel_axes, *input_axes), jnp.int8)
    return int8.Weight(values, scale)


class Projection(nn.Module):
    """A weight (and optional bias) contracted with the input by `equation`: x's last `merged` axes
    with the kernel's first `merged` axes."""

    equation: str
    kernel_shape: tuple[int, ...]
    kernel_axes: tuple[str, ...]
    bias_axes: tuple[str, ...] | None = None  # bias covers the trailing output axes
    dtype: jnp.dtype = jnp.float32
    # They contract as one flat axis in a plain matmul (the equation only documents it): given
    # several contracting axes (o: N, H), XLA CPU transposes the whole weight on every call.
    merged: int = 1
    weights: str = "float"  # ModelConfig.weights_at: "float", "int8", "int4" or a GGUF block format

    def setup(self) -> None:
        if self.weights == "float":
            self.kernel = logical_param(self, "kernel", self.kernel_shape, self.kernel_axes, self.dtype)
        else:
            # Output-major ([N..., K...], see engine/model/int8.py): the output axes move to the front.
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

    def __call__(self, x: Array, lora: "LoraRows | None" = None) -> Array:
        return project(x, [self], lora)[0]

    def biased(self, y: Array) -> Array:
        return y + self.bias if self.bias_axes is not None else y


def project(x: Array, projections: Sequence[Projection], lora: "LoraRows | None" = None) -> list[Array]:
    """Several projections of one input in one matmul call (one native call on a CPU: 3 weights
    streamed at once instead of 3 calls); int8 ones quantize x once. With `lora`, each adapted
    projection adds its rows' adapter deltas (engine/model/layers/lora.py): x times every slot's A in
    the same call as float kernels, then each row's own slot's columns times B."""
    merged = projections[0].merged
    adapted = [lora.weights.get(projection.name or "") if lora is not None else None for projection in projections]
    downs = [weights.a for weights in adapted if weights is not None]
    if projections[0].weights == "float":
        products = float_matmuls(x, [projection.kernel for projection in projections] + downs, merged)
        ys, xas = products[: len(projections)], products[len(projections) :]
    else:
        quantized = [projection.quantized for projection in projections]
        if all(isinstance(weight, BlockWeight) for weight in quantized):
            ys = gguf_weights.matmuls(x, cast(list[BlockWeight], quantized), merged)
        else:
            ys = int8.flat_matmuls(x, cast(list[int8.Weight], quantized), merged)
        xas = float_matmuls(x, downs, merged) if downs else []
    outs = [projection.biased(y.astype(projection.dtype)) for projection, y in zip(projections, ys, strict=True)]
    if lora is None:
        return outs
    low_rank = iter(xas)
    for i, weights in enumerate(adapted):
        if weights is not None:
            xa = next(low_rank)
            own = jnp.where(lora.kept[:, None, :], xa, jnp.zeros((), xa.dtype))  # other slots' columns: zero
            outs[i] = outs[i] + float_matmuls(own.astype(weights.b.dtype), [weights.b])[0].astype(outs[i].dtype)
    return outs
