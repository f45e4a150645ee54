"""Logical axes → device mesh, and placing host weights straight onto their shards.

Layers name their parameter axes logically (`engine/GLOSSARY.md`); `RULES` is the one table that
maps those names to mesh axes. The mesh has a single tensor-parallel axis: heads, MLP width,
experts and vocabulary are split across it. A dimension that does not divide evenly by the mesh
size stays replicated (e.g. 2 KV heads on 4 devices), which is correct, only less memory-efficient.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

TENSOR_AXIS = "tp"

RULES: Mapping[str, str | None] = {
    "vocab": TENSOR_AXIS,
    "embed": None,
    "q_heads": TENSOR_AXIS,
    "kv_heads": TENSOR_AXIS,
    "head_dim": None,
    "ffn": TENSOR_AXIS,
    "experts": TENSOR_AXIS,
    "expert_ffn": None,
    "router": None,
}


def make_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    chosen = list(devices) if devices is not None else jax.devices()
    return Mesh(np.array(chosen), (TENSOR_AXIS,))


def sharding_for(shape: tuple[int, ...], logical_axes: Sequence[str | None], mesh: Mesh) -> NamedSharding:
    mesh_axes: list[str | None] = []
    for size, logical in zip(shape, logical_axes, strict=True):
        axis = RULES[logical] if logical is not None else None
        if axis is not None and (axis in mesh_axes or size % mesh.shape[axis] != 0):
            axis = None
        mesh_axes.append(axis)
    return NamedSharding(mesh, PartitionSpec(*mesh_axes))


def shardings_for(shapes: Any, logical_specs: Any, mesh: Mesh) -> Any:
    """A tree of NamedSharding, from trees of shapes and of logical PartitionSpecs."""
    return jax.tree.map(
        lambda shape, spec: sharding_for(shape.shape, tuple(spec), mesh),
        shapes,
        logical_specs,
        is_leaf=lambda x: isinstance(x, PartitionSpec),
    )


def place(host: np.ndarray, sharding: NamedSharding, dtype: Any = None) -> jax.Array:
    """Reads only the slices of `host` that this process's devices hold, each cast to `dtype` on
    its own, and copies each to its device. `host` may be a lazy view (a memory-mapped file's
    tensor, transposed or reshaped): in a process group (engine/device/process_group.py) every process
    then reads only its own shards of the checkpoint, and host memory holds one slice at a time."""
    return jax.make_array_from_callback(
        host.shape, sharding, lambda index: np.ascontiguousarray(host[index], dtype=dtype or host.dtype)
    )
