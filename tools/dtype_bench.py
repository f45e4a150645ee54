"""How XLA's backend here runs the default model's MLP matmuls with f32 and bf16 weights.

    python tools/dtype_bench.py

Thirty layers of SmolLM2-135M's gate/up/down shapes (576×1536), jitted, at batch 1, 32 and 256;
best of 10 per case. Three ways: f32 weights; bf16 weights converted to f32 inside the graph; bf16
weights with bf16 × bf16 → f32 dots. The figures behind `--dtype auto` (docs/BENCHMARKS.md).
"""

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

LAYERS, HIDDEN, FFN = 30, 576, 1536
BATCHES = (1, 32, 256)
REPEATS = 10

Weights = list[jax.Array]


def best_ms(fn: Callable[[jax.Array, Weights], jax.Array], x: jax.Array, weights: Weights) -> float:
    jax.block_until_ready(fn(x, weights))
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        jax.block_until_ready(fn(x, weights))
        best = min(best, time.perf_counter() - start)
    return best * 1000


def mlp_stack(mode: str) -> Callable[[jax.Array, Weights], jax.Array]:
    def run(x: jax.Array, weights: Weights) -> jax.Array:
        for layer in range(LAYERS):
            gate, up, down = weights[3 * layer : 3 * layer + 3]
            if mode == "bf16 dots":
                h = x.astype(jnp.bfloat16)
                g = jnp.matmul(h, gate, preferred_element_type=jnp.float32)
                u = jnp.matmul(h, up, preferred_element_type=jnp.float32)
                mixed = (jax.nn.silu(g) * u).astype(jnp.bfloat16)
                x = x + jnp.matmul(mixed, down.T, preferred_element_type=jnp.float32)
                continue
            if mode == "bf16 weights, f32 dots":
                gate, up, down = (w.astype(jnp.float32) for w in (gate, up, down))
            x = x + (jax.nn.silu(x @ gate) * (x @ up)) @ down.T
        return x

    return jax.jit(run)


def main() -> None:
    rng = np.random.default_rng(0)
    f32 = [jnp.asarray(rng.standard_normal((HIDDEN, FFN), np.float32) * 0.02) for _ in range(3 * LAYERS)]
    bf16 = [w.astype(jnp.bfloat16) for w in f32]
    cases = (("f32", f32), ("bf16 weights, f32 dots", bf16), ("bf16 dots", bf16))
    print(f"backend: {jax.default_backend()}, {jax.device_count()} device(s)")
    for batch in BATCHES:
        x = jnp.ones((batch, HIDDEN), jnp.float32)
        figures = ", ".join(f"{mode} {best_ms(mlp_stack(mode), x, weights):.1f} ms" for mode, weights in cases)
        print(f"batch {batch}: {figures}")


if __name__ == "__main__":
    main()
