"""The native kernels (engine/kernels): the int8 matmul against XLA's int8 dot, the same function
bit for bit; and which steps run them. (The decode attention kernel's numbers are checked against
dense attention in test_paged_attention.py.)

Matmul shapes cover the kernel's tiles and their remainders (rows not a multiple of 4, channels not
a multiple of 4 or of a 64-channel chunk, depths not a multiple of 64) and products large enough to
split across threads.
"""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import int8, kernels
from engine.layers import PagedLayerCache, empty_pool, paged_attention


def test_the_kernel_builds_where_a_compiler_is() -> None:
    # Without a compiler the engine falls back to XLA's dot (the rest of this file then checks nothing
    # of the kernel); where one is, the kernel must build and load.
    assert kernels.available() == (shutil.which(os.environ.get("CXX", "c++")) is not None)


@pytest.mark.parametrize(
    ("rows", "channels", "depth"),
    [(1, 48, 64), (1, 7, 100), (2, 130, 577), (3, 64, 64), (5, 257, 1536), (8, 192, 576), (1, 4099, 576)],
)
def test_the_kernel_equals_xlas_int8_dot(rows: int, channels: int, depth: int) -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here (the XLA path is tested in test_int8.py)")
    rng = np.random.default_rng(rows * 7919 + channels)
    x = rng.standard_normal((rows, depth)).astype(np.float32) * rng.choice([0.01, 1.0, 30.0], depth)
    x[0, :4] = [127.0, 2.5, -3.5, 0.5]  # scale 1: halves round to even, as jnp.round does
    if rows > 2:
        x[2] = 0.0  # a zero row takes scale 1
    weight = jnp.asarray(rng.integers(-127, 128, (channels, depth)), jnp.int8)
    weight_scale = jnp.asarray(rng.random(channels) + 0.01, jnp.float32)
    got = jax.jit(kernels.int8_matmul)(jnp.asarray(x), [(weight, weight_scale)])[0]
    expected = jax.jit(int8.xla_matmuls)(jnp.asarray(x), [(weight, weight_scale)])[0]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_extreme_values_do_not_overflow() -> None:
    """-127 against -127 over a long depth: the unsigned-shift correction must stay exact."""
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    depth = 4096
    x = jnp.full((2, depth), -127.0, jnp.float32)  # row scale 1: quantized to -127
    weight = jnp.stack([jnp.full(depth, -127, jnp.int8), jnp.full(depth, 127, jnp.int8)])
    ones = jnp.ones(2, jnp.float32)
    got = np.asarray(jax.jit(kernels.int8_matmul)(x, [(weight, ones)])[0])
    np.testing.assert_array_equal(got, [[127 * 127 * depth, -127 * 127 * depth]] * 2)


@pytest.mark.parametrize(("step_tokens", "native"), [(1, True), (4, False)])
def test_one_token_steps_attend_natively(step_tokens: int, native: bool) -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    rows, heads, group, head_dim, pages, page = 2, 2, 3, 8, 5, 4
    q = jnp.zeros((rows, step_tokens, heads, group, head_dim))
    kv = jnp.zeros((rows, step_tokens, heads, head_dim))
    pool = empty_pool(heads, pages, page, head_dim, jnp.bfloat16)
    tables = jnp.ones((rows, 2), jnp.int32)
    positions = jnp.zeros((rows, step_tokens), jnp.int32)
    lowered = jax.jit(paged_attention).lower(q, kv, kv, positions, PagedLayerCache(pool, pool), tables)
    assert (kernels.PAGED_DECODE_ATTENTION in lowered.as_text()) == native


def test_one_call_multiplies_several_weights() -> None:
    """q, k and v (or gate and up) in one call: each result equals its own matmul."""
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((2, 96)), jnp.float32)
    weights = [
        (jnp.asarray(rng.integers(-127, 128, (n, 96)), jnp.int8), jnp.asarray(rng.random(n) + 0.01, jnp.float32))
        for n in (40, 7, 1000)
    ]
    got = jax.jit(kernels.int8_matmul)(x, weights)
    assert [y.shape for y in got] == [(2, 40), (2, 7), (2, 1000)]
    for y, expected in zip(got, int8.xla_matmuls(x, weights), strict=True):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(expected))
