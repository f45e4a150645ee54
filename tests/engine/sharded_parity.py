"""Run in a subprocess by test_sharding.py: needs 4 CPU devices, which must be set before jax starts.

Prints one JSON line: per model, the max logit difference between 1-device and 4-device loads
(fresh and from the prepared cache, and with int8 and Q4 matmuls) and the partition specs of a few
parameters.
"""

import json
import sys
import tempfile
from pathlib import Path

import jax

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 4)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from engine.model.loading.loader import LoadedModel, load_model  # noqa: E402
from engine.model.sharding import place  # noqa: E402
from tests.engine.tiny_checkpoints import build_tiny_checkpoint, tiny_prompt  # noqa: E402


def logits(model: LoadedModel) -> np.ndarray:
    tokens = tiny_prompt()
    positions = np.broadcast_to(np.arange(tokens.shape[1], dtype=np.int32), tokens.shape)
    return np.asarray(model.forward(jnp.asarray(tokens), jnp.asarray(positions))[0])


class Recording:
    """A host tensor that records the slices read from it (a lazy, memory-mapped one's stand-in)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values, self.shape, self.dtype = values, values.shape, values.dtype
        self.read: list[tuple[int, ...]] = []

    def __getitem__(self, index: tuple[slice, ...]) -> np.ndarray:
        part = self.values[index]
        self.read.append(part.shape)
        return part


def placed_slices() -> dict[str, object]:
    """What `place` reads of a [8, 6] float64 tensor split over 4 devices by rows, cast to float32."""
    values = np.arange(48, dtype=np.float64).reshape(8, 6)
    host = Recording(values)
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("tp",)), PartitionSpec("tp", None))
    placed = place(host, sharding, np.float32)  # type: ignore[arg-type]
    return {"read": sorted(host.read), "equal": bool((np.asarray(placed) == values).all()), "dtype": str(placed.dtype)}


def main(names: list[str]) -> None:
    devices = jax.devices()
    assert len(devices) == 4, devices
    report: dict[str, object] = {"place": placed_slices()}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            checkpoint = build_tiny_checkpoint(name, Path(tmp) / name)
            shared_cache, fresh_cache = Path(tmp) / f"{name}-cache", Path(tmp) / f"{name}-fresh"
            single = load_model(checkpoint, devices=devices[:1], cache_dir=shared_cache, progress=False)
            restored = load_model(checkpoint, devices=devices, cache_dir=shared_cache, progress=False)
            fresh = load_model(checkpoint, devices=devices, cache_dir=fresh_cache, progress=False)
            reference = logits(single)
            int8_single, int8_sharded = (
                load_model(checkpoint, devices=d, cache_dir=shared_cache, progress=False, quantization="w8a8")
                for d in (devices[:1], devices)
            )
            int8_reference = logits(int8_single)
            q4_single, q4_sharded = (
                load_model(checkpoint, devices=d, cache_dir=shared_cache, progress=False, quantization="w4a8")
                for d in (devices[:1], devices)
            )
            q4_reference = logits(q4_single)
            q4_q = q4_sharded.params["layer_0"]["attn"]["q"]
            report[name] = {
                "restored_from_cache": restored.from_cache,
                "max_diff_restored": float(np.abs(logits(restored) - reference).max()),
                "max_diff_fresh": float(np.abs(logits(fresh) - reference).max()),
                "specs": {
                    "/".join(str(k.key) for k in path): str(tuple(leaf.sharding.spec))
                    for path, leaf in jax.tree_util.tree_flatten_with_path(fresh.params["layer_0"])[0]
                },
                "embedding_spec": str(tuple(fresh.params["embed"]["embedding"].sharding.spec)),
                "max_diff_w8a8": float(np.abs(logits(int8_sharded) - int8_reference).max()),
                "max_abs_w8a8": float(np.abs(int8_reference).max()),
                "w8a8_q_scale_spec": str(
                    tuple(int8_sharded.params["layer_0"]["attn"]["q"]["kernel_scale"].sharding.spec)
                ),
                "w4a8_q_packed": str(q4_q["kernel"].dtype) == "uint8",
                "w4a8_q_spec": str(tuple(q4_q["kernel"].sharding.spec)),
                "max_diff_w4a8": float(np.abs(logits(q4_sharded) - q4_reference).max()),
                "max_abs_w4a8": float(np.abs(q4_reference).max()),
            }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
