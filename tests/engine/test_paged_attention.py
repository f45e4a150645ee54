"""Paged attention against plain causal attention over each row's whole context, from float32
and bfloat16 pools.

Each row must attend as dense attention does, through XLA's loop over blocks of positions and
through what `paged_attention` dispatches to (the native kernels on CPU); and bit for bit the same
however its prompt was split and whatever rows share its step.
"""

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine.model.kernels import available as kernels_available
from engine.model.layers.kv_cache import BurstSide, PagedLayerCache, empty_pool, pool_values, to_pool
from engine.model.layers.paged_attention import ATTENTION_BLOCK_TOKENS, paged_attention, xla_paged_attention

pytestmark = pytest.mark.slow  # compiles attention at many shapes

K, G, H, PAGE = 2, 2, 8, 4  # kv heads, queries per kv head, head dim, tokens per page


def _dense(q: np.ndarray, keys: np.ndarray, values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """One row: q [T,K,G,H] at `positions` over keys/values [S,K,H] at positions 0..S-1."""
    scores = np.einsum("tkgh,skh->tkgs", q, keys) / math.sqrt(q.shape[-1])
    scores = np.where(np.arange(keys.shape[0])[None, None, None] <= positions[:, None, None, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("tkgs,skh->tkgh", probs, values).reshape(len(positions), -1)


def _context(pool: np.ndarray, own: np.ndarray, slots: list[tuple[int, int]]) -> np.ndarray:
    """A row's keys or values [S, K, H]: its earlier positions from the pool, then the step's own."""
    earlier = [pool[:, page, slot] for page, slot in slots]  # [K, H] each
    return np.concatenate([np.array(earlier).reshape(-1, *own.shape[1:]), own])


def _attends_as_dense_attention(
    attention: Callable[..., jax.Array],
    in_pool: np.ndarray,
    step_tokens: int,
    dtype: jnp.dtype,
    rng: np.random.Generator,
    shape: tuple[int, int, int, int] = (K, G, H, PAGE),
) -> None:
    """Each row of a step (`in_pool[row]` positions already in the pool) against `_dense`."""
    kv_heads, group, head_dim, page = shape
    rows = len(in_pool)
    pages_per_row = -(-int(in_pool.max() + step_tokens) // page) + 1
    pool_pages = 1 + rows * pages_per_row
    tables = 1 + rng.permutation(rows * pages_per_row).reshape(rows, pages_per_row).astype(np.int32)
    pool_k, pool_v = (rng.standard_normal((kv_heads, pool_pages, page, head_dim)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((rows, step_tokens, kv_heads, group, head_dim)).astype(np.float32)
    k, v = (rng.standard_normal((rows, step_tokens, kv_heads, head_dim)).astype(np.float32) for _ in range(2))
    positions = (in_pool[:, None] + np.arange(step_tokens)[None]).astype(np.int32)

    template = empty_pool(kv_heads, pool_pages, page, head_dim, dtype)
    stored = PagedLayerCache(to_pool(jnp.asarray(pool_k), template), to_pool(jnp.asarray(pool_v), template))
    got = jax.jit(attention)(
        jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(positions), stored, jnp.asarray(tables)
    )
    # bfloat16 keeps 8 bits of mantissa of the queries, keys and values (attention sums in float32).
    tolerance = 2e-5 if dtype == jnp.float32 else 3e-2

    for row in range(rows):
        slots = [(tables[row, p // page], p % page) for p in range(in_pool[row])]
        keys, values = (_context(pool, own[row], slots) for pool, own in ((pool_k, k), (pool_v, v)))
        expected = _dense(q[row], keys, values, positions[row])
        np.testing.assert_allclose(np.asarray(got[row]), expected, rtol=tolerance, atol=tolerance)


# 70 step tokens: two tiles of the native prefill kernel's queries and two blocks of own keys.
@pytest.mark.parametrize(("rows", "step_tokens"), [(1, 1), (16, 1), (1, 5), (2, 5), (2, 70)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("attention", [paged_attention, xla_paged_attention], ids=["dispatched", "xla"])
def test_each_row_attends_as_dense_attention(
    rows: int, step_tokens: int, dtype: jnp.dtype, attention: Callable[..., jax.Array]
) -> None:
    rng = np.random.default_rng(rows * 10 + step_tokens)
    block = ATTENTION_BLOCK_TOKENS
    # Contexts from empty to past two blocks, so rows take different numbers of loop turns; the
    # first row sees two blocks whole (a prefill step skips their masking when every row does).
    in_pool = rng.integers(0, 2 * block + 3, rows)
    in_pool[0] = 2 * block + 3
    _attends_as_dense_attention(attention, in_pool, step_tokens, dtype, rng)


# The native decode kernel's own blocking: queries three at a time (1; 3; 4 = 3 + 1; 7 = 3 + 3 + 1),
# head sizes in pairs of vectors of eight (16) or pairs and one more (24), 64 and 128 (sixteen
# lanes with AVX-512), and 12 (not a multiple of eight: XLA's path), pages that divide its 128-key
# blocks or not (48: blocks of 96), contexts of 0 to 301 keys (past two blocks, and not a multiple
# of the four keys it scores at a time) and of 2,100 (three chunks of 1,024 keys, merged).
KERNEL_SHAPES = [(1, 64, 16), (3, 64, 16), (3, 128, 16), (4, 24, 48), (7, 16, 16), (3, 12, 16)]


@pytest.mark.parametrize(("group", "head_dim", "page"), KERNEL_SHAPES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_decode_steps_attend_as_dense_attention_at_the_kernels_shapes(
    group: int, head_dim: int, page: int, dtype: jnp.dtype
) -> None:
    rng = np.random.default_rng(group * 100 + head_dim)
    in_pool = np.array([301, 0, 1, 127, 128, 130, 47, 2100])
    _attends_as_dense_attention(paged_attention, in_pool, 1, dtype, rng, (3, group, head_dim, page))


@pytest.mark.parametrize("attention", [paged_attention, xla_paged_attention], ids=["dispatched", "xla"])
def test_padding_tokens_change_nothing_for_real_ones(attention: Callable[..., jax.Array]) -> None:
    """The engine pads a short prompt chunk with tokens at a position past every real one."""
    rng = np.random.default_rng(7)
    step_tokens, real, in_pool, pages = 9, 6, 5, 8
    tables = np.arange(1, pages + 1, dtype=np.int32)[None]
    pool_k, pool_v = (rng.standard_normal((K, pages + 1, PAGE, H)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((1, step_tokens, K, G, H)).astype(np.float32)
    k, v = (rng.standard_normal((1, step_tokens, K, H)).astype(np.float32) for _ in range(2))
    positions = np.full((1, step_tokens), pages * PAGE, np.int32)
    positions[0, :real] = in_pool + np.arange(real)
    stored = PagedLayerCache(jnp.asarray(pool_k), jnp.asarray(pool_v))
    got = jax.jit(attention)(*map(jnp.asarray, (q, k, v, positions)), stored, jnp.asarray(tables))

    slots = [(tables[0, p // PAGE], p % PAGE) for p in range(in_pool)]
    keys, values = (_context(pool, own[0, :real], slots) for pool, own in ((pool_k, k), (pool_v, v)))
    expected = _dense(q[0, :real], keys, values, positions[0, :real])
    np.testing.assert_allclose(np.asarray(got[0, :real]), expected, rtol=2e-5, atol=2e-5)


class _Prompt:
    """One prompt's queries, keys and values (150 tokens, 3 KV heads of 3 queries, head size 64,
    pages of 16), and its pools: empty, or holding its first `split` positions."""

    TOKENS, PAGE, KV_HEADS, GROUP, HEAD_DIM = 150, 16, 3, 3, 64

    def __init__(self, dtype: jnp.dtype) -> None:
        rng = np.random.default_rng(3)
        pages = -(-self.TOKENS // self.PAGE)
        self.tables = jnp.asarray([[*range(1, pages + 1), 0]], jnp.int32)
        shape = (1, self.TOKENS, self.KV_HEADS)
        self.q = jnp.asarray(rng.standard_normal((*shape, self.GROUP, self.HEAD_DIM)), jnp.float32)
        self.k, self.v = (jnp.asarray(rng.standard_normal((*shape, self.HEAD_DIM)), jnp.float32) for _ in range(2))
        self.positions = jnp.arange(self.TOKENS, dtype=jnp.int32)[None]
        self.empty = PagedLayerCache(
            *(empty_pool(self.KV_HEADS, pages + 1, self.PAGE, self.HEAD_DIM, dtype) for _ in range(2))
        )

    def cached(self, split: int) -> PagedLayerCache:
        slots = np.arange(split)
        page_ids = np.asarray(self.tables[0])[slots // self.PAGE]
        return PagedLayerCache(
            *(
                pool.at[:, page_ids, slots % self.PAGE].set(to_pool(new[0, :split].transpose(1, 0, 2), pool))
                for pool, new in ((self.empty.k, self.k), (self.empty.v, self.v))
            )
        )

    def from_(self, split: int) -> tuple[jax.Array, ...]:
        """The step from position `split` on: queries, keys, values, positions."""
        return self.q[:, split:], self.k[:, split:], self.v[:, split:], self.positions[:, split:]


@pytest.mark.parametrize("attention", [paged_attention, xla_paged_attention], ids=["dispatched", "xla"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_a_prompt_attends_the_same_however_it_is_split(attention: Callable[..., jax.Array], dtype: jnp.dtype) -> None:
    """A prompt prefilled whole and prefilled from a split point (the keys before it read back from
    the pool, as after a prefix-cache hit or an earlier chunk) gives bit-identical attention: what
    the prefix cache holds must not change a seeded request's tokens. Splits off the kernels'
    blocks and off pages included. A one-token tail (XLA's path only: on CPU a one-token step takes
    the decode kernel, and the engine pads a prompt's chunks to 8 tokens at least) leaves XLA's
    matmuls one query a KV head's group."""
    prompt = _Prompt(dtype)
    attend = jax.jit(attention)
    whole = np.asarray(attend(*prompt.from_(0), prompt.empty, prompt.tables))
    one_token = (149,) if attention is xla_paged_attention else ()
    for split in (16, 24, 64, 100, 128, 144, 147, *one_token):
        tail = attend(*prompt.from_(split), prompt.cached(split), prompt.tables)
        assert np.array_equal(np.asarray(tail), whole[:, split:]), split


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("group", [3, 1])
def test_xla_attention_gives_a_token_the_same_numbers_in_any_step(dtype: jnp.dtype, group: int) -> None:
    """XLA's path (the GPU's) attends a token bit for bit alike as one of a prompt's tokens and as a
    decode step's row, alone or beside other rows with other contexts: its blocks are absolute
    positions and its sums do not depend on the step's shape. One query a KV head (group 1) too."""
    prompt = _Prompt(dtype)
    q = prompt.q[:, :, :, :group]
    attend = jax.jit(xla_paged_attention)
    whole = np.asarray(attend(q, prompt.k, prompt.v, prompt.positions, prompt.empty, prompt.tables))
    last = prompt.TOKENS - 1
    cached = prompt.cached(last)
    q1, k1, v1, p1 = (x[:, last:] for x in (q, prompt.k, prompt.v, prompt.positions))
    alone = np.asarray(attend(q1, k1, v1, p1, cached, prompt.tables))
    assert np.array_equal(alone[:, 0], whole[:, last])
    # Beside 4 other rows at other positions over the same pages (their numbers do not matter here).
    rng = np.random.default_rng(5)
    rows = 5
    others = jnp.asarray(rng.standard_normal((rows, 1, prompt.KV_HEADS, group, prompt.HEAD_DIM)), jnp.float32)
    batch_q = others.at[2].set(q1[0])
    batch_k = jnp.broadcast_to(k1, (rows, *k1.shape[1:]))
    batch_v = jnp.broadcast_to(v1, (rows, *v1.shape[1:]))
    batch_positions = jnp.asarray([[3], [77], [last], [140], [0]], jnp.int32)
    batch_tables = jnp.broadcast_to(prompt.tables, (rows, prompt.tables.shape[1]))
    beside = np.asarray(attend(batch_q, batch_k, batch_v, batch_positions, cached, batch_tables))
    assert np.array_equal(beside[2, 0], whole[0, last])


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize(
    ("group", "page", "in_pool", "head_dim"),
    [(3, 16, (0, 13, 125), 16), (4, 4, (7, 130, 1), 16), (2, 1, (3, 9, 0), 16), (3, 16, (1022, 2046, 5), 64)],
)
def test_a_step_over_drafts_attends_as_decode_steps_one_token_at_a_time(
    dtype: jnp.dtype, group: int, page: int, in_pool: tuple[int, ...], head_dim: int
) -> None:
    """Each token of a draft step (a row's tokens at consecutive positions, padding after its last)
    gets, bit for bit, what a one-token decode step at its position gives once the tokens before it
    are in the pool: the same kernel arithmetic, keys crossing page and 128-key block boundaries
    and 1,024-key chunk boundaries (head size 64: sixteen lanes with AVX-512)."""
    if not kernels_available():
        pytest.skip("no C++ compiler: the draft step takes XLA's path, equal up to rounding")
    rng = np.random.default_rng(5)
    kv_heads, tokens = 2, 5
    rows, live = len(in_pool), (5, 3, 1)  # tokens each row brings; the rest are padding
    pages_per_row = -(-(max(in_pool) + tokens) // page) + 1
    pool_pages = 1 + rows * pages_per_row
    tables = 1 + rng.permutation(rows * pages_per_row).reshape(rows, pages_per_row).astype(np.int32)
    tables[:, -1] = 0  # the null page's column, where padding tokens sit
    template = empty_pool(kv_heads, pool_pages, page, head_dim, dtype)
    pool_k, pool_v = (
        to_pool(jnp.asarray(rng.standard_normal((kv_heads, pool_pages, page, head_dim)), jnp.float32), template)
        for _ in range(2)
    )
    q = jnp.asarray(rng.standard_normal((rows, tokens, kv_heads, group, head_dim)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((rows, tokens, kv_heads, head_dim)), jnp.float32) for _ in range(2))
    padding = (pages_per_row - 1) * page
    positions = np.full((rows, tokens), padding, np.int32)
    for row, (start, count) in enumerate(zip(in_pool, live, strict=True)):
        positions[row, :count] = np.arange(start, start + count)

    cache = PagedLayerCache(pool_k, pool_v)
    drafted = jax.jit(functools.partial(paged_attention, draft_step=True))(q, k, v, positions, cache, tables)
    for row, (start, count) in enumerate(zip(in_pool, live, strict=True)):
        written = cache
        for t in range(count):  # decode steps, each writing its key and value as the engine's `write` does
            one = slice(row, row + 1)
            decoded = jax.jit(paged_attention)(
                q[one, t : t + 1], k[one, t : t + 1], v[one, t : t + 1], positions[one, t : t + 1], written, tables[one]
            )
            assert np.array_equal(np.asarray(drafted[row, t]), np.asarray(decoded[0, 0])), (row, t)
            page_id, slot = tables[row, (start + t) // page], (start + t) % page
            written = PagedLayerCache(
                written.k.at[:, page_id, slot].set(to_pool(k[row, t], written.k)),
                written.v.at[:, page_id, slot].set(to_pool(v[row, t], written.v)),
            )
        assert not np.asarray(drafted[row, count:]).any(), "padding tokens' outputs are zeros"


@pytest.mark.parametrize("attention", [paged_attention, xla_paged_attention], ids=["dispatched", "xla"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize(
    ("group", "page", "in_pool", "head_dim"),
    [(3, 16, (0, 13, 125), 16), (2, 1, (3, 9, 0), 16), (3, 16, (1022, 2046, 5), 64)],
)
def test_a_burst_step_attends_as_a_decode_step_once_the_burst_is_in_the_pool(
    attention: Callable[..., jax.Array],
    dtype: jnp.dtype,
    group: int,
    page: int,
    in_pool: tuple[int, ...],
    head_dim: int,
) -> None:
    """Step j of a decode burst (each row's burst keys so far in the side buffer, the pool holding
    the positions before the burst) gets, bit for bit, what a decode step at its position gives once
    the burst's earlier keys are in the pool: through the native burst kernel and through XLA's
    path, keys crossing page, 128-key block and 1,024-key chunk boundaries."""
    rng = np.random.default_rng(6)
    kv_heads, steps, rows = 2, 5, len(in_pool)
    pages_per_row = -(-(max(in_pool) + steps) // page) + 1
    pool_pages = 1 + rows * pages_per_row
    tables = 1 + rng.permutation(rows * pages_per_row).reshape(rows, pages_per_row).astype(np.int32)
    tables[:, -1] = 0
    template = empty_pool(kv_heads, pool_pages, page, head_dim, dtype)
    pool_k, pool_v = (
        to_pool(jnp.asarray(rng.standard_normal((kv_heads, pool_pages, page, head_dim)), jnp.float32), template)
        for _ in range(2)
    )
    q = jnp.asarray(rng.standard_normal((rows, steps, kv_heads, group, head_dim)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((rows, steps, kv_heads, head_dim)), jnp.float32) for _ in range(2))
    side_k, side_v = (pool_values(to_pool(x, template)) for x in (k, v))  # as a burst's carry holds them
    starts = np.asarray(in_pool, np.int32)
    cache = written = PagedLayerCache(pool_k, pool_v)
    decode, burst = jax.jit(attention), jax.jit(lambda *inputs, side: attention(*inputs, side=side))
    for j in range(steps):
        positions = (starts + j)[:, None]
        one = (q[:, j : j + 1], k[:, j : j + 1], v[:, j : j + 1], positions)
        # Entries past j hold later steps' keys: a step must not read them.
        bursting = np.asarray(burst(*one, cache, tables, side=BurstSide(side_k, side_v, jnp.int32(j))))
        decoded = np.asarray(decode(*one, written, tables))
        assert np.array_equal(bursting, decoded), j
        pages, slots = tables[np.arange(rows), positions[:, 0] // page], positions[:, 0] % page
        written = PagedLayerCache(
            written.k.at[:, pages, slots].set(to_pool(jnp.moveaxis(k[:, j], 1, 0), written.k)),
            written.v.at[:, pages, slots].set(to_pool(jnp.moveaxis(v[:, j], 1, 0), written.v)),
        )
