"""The native kernels (engine/model/kernels): the int8 matmul against XLA's int8 dot, the same function
bit for bit; the Q4 matmul against its definition computed here; and which steps run them. (The
decode attention kernel's numbers are checked against dense attention in test_paged_attention.py.)

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

from engine.model import int4, int8, kernels
from engine.model.layers.kv_cache import PagedLayerCache, empty_pool
from engine.model.layers.paged_attention import paged_attention

pytestmark = pytest.mark.slow  # builds the native kernels and compiles them at many shapes


def test_the_kernel_builds_where_a_compiler_is() -> None:
    # Without a compiler the engine falls back to XLA's dot (the rest of this file then checks nothing
    # of the kernel); where one is, the kernel must build and load.
    assert kernels.available() == (shutil.which(os.environ.get("CXX", "c++")) is not None)


@pytest.mark.parametrize(("channels", "depth"), [(1536, 576), (576, 1536), (50257, 64), (7, 100), (1, 576)])
def test_a_float_matmul_row_never_depends_on_the_other_rows(channels: int, depth: int) -> None:
    """Every row count (the streamed rows up to 4, register tiles beyond, tiles cut short, packed
    weights from 64 rows) and any position among the rows give a row the same bits, within
    float32 rounding of the exact product."""
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    rng = np.random.default_rng(channels + depth)
    x = rng.standard_normal((200, depth)).astype(np.float32)
    weight = jnp.asarray(rng.standard_normal((depth, channels)).astype(np.float32))
    matmul = jax.jit(lambda x, w: kernels.f32_matmul(x, [w, w[:, : max(1, channels // 3)]]))
    whole, third = (np.asarray(y) for y in matmul(jnp.asarray(x), weight))
    exact = x.astype(np.float64) @ np.asarray(weight, np.float64)
    np.testing.assert_allclose(whole, exact, rtol=0, atol=1e-4 * np.sqrt(depth) * 4)
    np.testing.assert_array_equal(third, whole[:, : third.shape[1]])
    # Up to 63 rows the weights are read as they are; from 64 packed, in blocks of 96 rows.
    for first, count in [(0, 1), (5, 1), (3, 2), (10, 4), (20, 5), (1, 8), (30, 11), (40, 30), (7, 64), (90, 101)]:
        rows = matmul(jnp.asarray(x[first : first + count]), weight)[0]
        np.testing.assert_array_equal(np.asarray(rows), whole[first : first + count], f"{count} rows from {first}")


@pytest.mark.parametrize(
    ("rows", "channels", "depth"),
    [
        (1, 48, 64),
        (1, 7, 100),
        (2, 130, 577),
        (3, 64, 64),
        (5, 257, 1536),
        (8, 192, 576),
        (8, 33, 1536),
        (1, 4099, 576),
    ],
)
def test_the_kernel_equals_xlas_int8_dot(rows: int, channels: int, depth: int) -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here (the XLA path is tested in test_int8.py)")
    rng = np.random.default_rng(rows * 7919 + channels)
    x = rng.standard_normal((rows, depth)).astype(np.float32) * rng.choice([0.01, 1.0, 30.0], depth)
    x[0, :4] = [127.0, 2.5, -3.5, 0.5]  # scale 1: halves round to even, as jnp.round does
    if rows > 2:
        x[2] = 0.0  # a zero row takes scale 1
    if rows > 1:
        x[1, :8] = _halves_apart(float(np.abs(x[1]).max()) + 1.0)
    weight = jnp.asarray(rng.integers(-127, 128, (channels, depth)), jnp.int8)
    weight_scale = jnp.asarray(rng.random(channels) + 0.01, jnp.float32)
    got = jax.jit(kernels.int8_matmul)(jnp.asarray(x), [(weight, weight_scale)])[0]
    expected = jax.jit(int8.xla_matmuls)(jnp.asarray(x), [int8.Weight(weight, weight_scale)])[0]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def _halves_apart(peak: float) -> np.ndarray:
    """The peak, then values v whose v / scale is exactly k + 0.5 but v · (1 / scale) is not (or the
    other way round): the quotient and the product round to different integers, so the kernel and
    XLA agree on them only if both take the same one."""
    scale = np.float32(peak) * np.float32(1 / 127)
    inverse = np.float32(1) / scale
    found = [np.float32(peak)]
    for k in range(-126, 126):
        for v in np.float32((k + 0.5) * scale) + np.arange(-2, 3, dtype=np.float32) * np.spacing(np.float32(k * scale)):
            if len(found) < 8 and (np.float32(v / scale) == k + 0.5) != (np.float32(v * inverse) == k + 0.5):
                found.append(np.float32(v))
    assert len(found) == 8, "no value rounds apart at this scale"
    return np.asarray(found, np.float32)


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


@pytest.mark.parametrize(
    ("step_tokens", "kernel"), [(1, kernels.PAGED_DECODE_ATTENTION), (4, kernels.PAGED_PREFILL_ATTENTION)]
)
def test_steps_attend_natively(step_tokens: int, kernel: str) -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    rows, heads, group, head_dim, pages, page = 2, 2, 3, 8, 5, 4
    q = jnp.zeros((rows, step_tokens, heads, group, head_dim))
    kv = jnp.zeros((rows, step_tokens, heads, head_dim))
    pool = empty_pool(heads, pages, page, head_dim, jnp.bfloat16)
    tables = jnp.ones((rows, 2), jnp.int32)
    positions = jnp.zeros((rows, step_tokens), jnp.int32)
    lowered = jax.jit(paged_attention).lower(q, kv, kv, positions, PagedLayerCache(pool, pool), tables).as_text()
    other = ({kernels.PAGED_DECODE_ATTENTION, kernels.PAGED_PREFILL_ATTENTION} - {kernel}).pop()
    assert kernel in lowered
    assert other not in lowered


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
    for y, expected in zip(got, int8.xla_matmuls(x, [int8.Weight(*pair) for pair in weights]), strict=True):
        np.testing.assert_array_equal(np.asarray(y), np.asarray(expected))


def q4_reference(x: np.ndarray, weight: int8.Weight) -> np.ndarray:
    """pooled_q4_matmul's definition (q4_matmul.cc) in float64: x quantized per block of 32."""
    assert weight.packed
    blocks = x.reshape(x.shape[0], -1, int4.BLOCK)
    scale = np.abs(blocks).max(axis=-1) * np.float32(1 / 127)
    scale = np.where(scale == 0, np.float32(1), scale)
    q = np.round(blocks / scale[..., None])
    block_sums = scale * q.sum(axis=-1)
    codes, d, m = (np.asarray(a, np.float64) for a in int4.fields(weight.values))
    dots = np.einsum("mbk,nbk->mnb", q, codes)
    return (dots * d[None] * scale[:, None] + m[None] * block_sums[:, None]).sum(-1)


@pytest.mark.parametrize(
    ("rows", "channels", "depth"), [(1, 48, 64), (2, 8, 576), (5, 136, 1536), (32, 24, 96), (3, 16, 2048)]
)
def test_the_q4_kernel_computes_its_definition(rows: int, channels: int, depth: int) -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    rng = np.random.default_rng(rows * 31 + depth)
    x = (rng.standard_normal((rows, depth)) * rng.choice([0.01, 1.0, 30.0], depth)).astype(np.float32)
    x[0, :32] = 0.0  # a zero block takes scale 1
    weight = int8.quantize(jnp.asarray(rng.standard_normal((depth, channels)), jnp.float32), 1, packed=True)
    got = np.asarray(jax.jit(kernels.q4_matmul)(jnp.asarray(x), [weight.values])[0])
    expected = q4_reference(x, weight)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    # A row's result does not depend on the rows beside it (tiles of 4 rows, remainders).
    for row in (0, rows - 1):
        alone = np.asarray(jax.jit(kernels.q4_matmul)(jnp.asarray(x[row : row + 1]), [weight.values])[0])
        np.testing.assert_array_equal(alone[0], got[row])


def test_q4_extremes() -> None:
    """Code 15 against 127 everywhere (the largest 16-bit sums), sums exact in float here."""
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    depth = 4096
    x = jnp.full((1, depth), 127.0, jnp.float32)  # block scale 1: quantized to 127

    # Two groups of 8 channels: codes 15 for every input; codes 0 for the first 4 of every 8 inputs;
    # every scale 2 and every minimum -1 (engine/model/int4.py's layout, block by block).
    def group(code_byte: int) -> np.ndarray:
        halves = np.concatenate([np.full(8, 2.0, np.float16), np.full(8, -1.0, np.float16)]).view(np.uint8)
        block = np.concatenate([np.full(8 * int4.BLOCK // 2, code_byte, np.uint8), halves])
        return np.tile(block, depth // int4.BLOCK).reshape(8, -1)

    weight = jnp.asarray(np.concatenate([group(0xFF), group(0xF0)]))
    got = np.asarray(jax.jit(kernels.q4_matmul)(x, [weight])[0])
    # Weights 2 * 15 - 1 = 29 everywhere; then code 0 (-1) for half of the inputs.
    np.testing.assert_array_equal(got, [[29 * 127 * depth] * 8 + [(29 - 1) * 127 * depth / 2] * 8])


def test_one_q4_call_multiplies_several_weights() -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    weights = [
        int8.quantize(jnp.asarray(rng.standard_normal((128, n)), jnp.float32), 1, packed=True) for n in (40, 8, 304)
    ]
    got = jax.jit(kernels.q4_matmul)(jnp.asarray(x), [weight.values for weight in weights])
    assert [y.shape for y in got] == [(3, 40), (3, 8), (3, 304)]
    for y, weight in zip(got, weights, strict=True):
        expected = q4_reference(x, weight)
        np.testing.assert_allclose(np.asarray(y), expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_malformed_q4_weights_are_refused() -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    x = jnp.ones((1, 64), jnp.float32)  # 64 inputs are 2 blocks: 40 bytes per channel
    with pytest.raises(Exception, match="is not uint8"):
        jax.jit(kernels.q4_matmul)(x, [jnp.zeros((8, 32), jnp.uint8)])
    with pytest.raises(Exception, match="multiple of 8"):
        jax.jit(kernels.q4_matmul)(x, [jnp.zeros((3, 40), jnp.uint8)])


@pytest.mark.parametrize("step_tokens", [1, 4])
def test_pools_of_two_types_are_refused(step_tokens: int) -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    rows, heads, group, head_dim, pages, page = 1, 2, 2, 8, 3, 4
    q = jnp.zeros((rows, step_tokens, heads, group, head_dim))
    kv = jnp.zeros((rows, step_tokens, heads, head_dim))
    f32_pool = empty_pool(heads, pages, page, head_dim, jnp.float32)
    bf16_pool = empty_pool(heads, pages, page, head_dim, jnp.bfloat16)
    tables = jnp.ones((rows, 2), jnp.int32)
    positions = jnp.zeros((rows, step_tokens), jnp.int32)
    with pytest.raises(Exception, match="pools must both be f32 or bf16 bits"):
        if step_tokens == 1:
            kernels.paged_decode_attention(q[:, 0], kv[:, 0], kv[:, 0], f32_pool, bf16_pool, tables, positions[:, 0])
        else:
            kernels.paged_prefill_attention(q, kv, kv, f32_pool, bf16_pool, tables, positions)


def test_decode_attention_refuses_head_sizes_it_cannot_vectorize() -> None:
    if not kernels.available():
        pytest.skip("no C++ compiler: the kernel is not built here")
    rows, heads, group, head_dim, pages, page = 1, 2, 2, 12, 3, 4
    pool = empty_pool(heads, pages, page, head_dim, jnp.float32)
    with pytest.raises(Exception, match="unsupported shapes"):
        kernels.paged_decode_attention(
            jnp.zeros((rows, heads, group, head_dim)),
            jnp.zeros((rows, heads, head_dim)),
            jnp.zeros((rows, heads, head_dim)),
            pool,
            pool,
            jnp.ones((rows, 2), jnp.int32),
            jnp.ones((rows,), jnp.int32),
        )
