"""`KVPool`: the KV pages on the device, every layer's, and the verbs that change them.

A step only reads the pool and returns its new keys and values (`Written`); `store` then writes
them into the donated pool. Kept apart, XLA updates the pool in place; in one function it copied
the whole pool every step. Between steps whole pages move: `copy_page` (a shared page a row is
about to write into) and `read_pages` / `write_pages` (the prefix cache's disk tier), in groups
of PAGE_TRANSFER_GROUP pages, one compiled shape.

Threads: only the runner (engine/device/runner.py) touches its pool: on the thread that builds
the engine while it compiles, then on the engine thread alone.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from engine.device.compiled_shapes import PAGE_TRANSFER_GROUP, page_group
from engine.device.executables import own_jit
from engine.model.layers.kv_cache import NewKV, PagedLayerCache, init_paged_caches, to_pool
from engine.model.model_config import ModelConfig

Array = jax.Array
KVPages = tuple[PagedLayerCache, ...]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Written:
    """A step's new keys and values, all layers in one array [L, 2 (key, value), B, T, K, H] (one
    output and one input instead of two per layer: each array costs the step's dispatch time), and
    where they go: page and slot [B,T]."""

    new: Array
    pages: Array
    slots: Array


def written(new: Any, positions: Array, block_tables: Array, page_size: int) -> Written:
    """A step's `Written`, from the model's new keys and values per layer and each token's position."""
    rows = jnp.arange(positions.shape[0])[:, None]
    pages = block_tables[rows, positions // page_size]
    stacked = jnp.stack([jnp.stack([n.k, n.v]) for n in cast(tuple[NewKV, ...], new)])
    return Written(stacked, pages, positions % page_size)


class KVPool:
    def __init__(self, config: ModelConfig, pages: int, page_size: int, dtype: jnp.dtype, placed: NamedSharding):
        """`placed`: where the steps' outputs live (replicated on the model's mesh), so the first
        real step finds the start-up compile instead of compiling again for another placement."""
        self.pages: KVPages = jax.device_put(init_paged_caches(config, pages, page_size, dtype), placed)
        self._placed = placed
        self._store = own_jit(_store, donate_argnums=(0,))
        self._copy_page = own_jit(_copy_page, donate_argnums=(0,))
        self._read_pages = own_jit(_read_pages)
        self._write_pages = own_jit(_write_pages, donate_argnums=(0,))
        pool = self.pages[0].k
        self._page_shape = (config.num_layers, 2, pool.shape[0], page_size, pool.shape[3])
        self._page_dtype = np.dtype(pool.dtype)
        self.page_bytes = math.prod(self._page_shape) * self._page_dtype.itemsize

    def store(self, written: Written) -> None:
        self.pages = self._store(self.pages, written)

    def copy_page(self, source: int, target: int) -> None:
        self.pages = self._copy_page(self.pages, np.int32(source), np.int32(target))

    def read_pages(self, pages: Sequence[int]) -> list[bytes]:
        contents = []
        for start in range(0, len(pages), PAGE_TRANSFER_GROUP):
            group = page_group(pages[start : start + PAGE_TRANSFER_GROUP])
            read = np.asarray(self._read_pages(self.pages, group))
            contents += [page.tobytes() for page in read[: min(PAGE_TRANSFER_GROUP, len(pages) - start)]]
        return contents

    def write_pages(self, pages: Sequence[int], contents: Sequence[bytes]) -> None:
        for start in range(0, len(pages), PAGE_TRANSFER_GROUP):
            chunk = contents[start : start + PAGE_TRANSFER_GROUP]
            # Padding entries write zeros into the null page, which no row reads as a real page.
            data = np.zeros((PAGE_TRANSFER_GROUP, *self._page_shape), self._page_dtype)
            for i, content in enumerate(chunk):
                data[i] = np.frombuffer(content, self._page_dtype).reshape(self._page_shape)
            group = page_group(pages[start : start + PAGE_TRANSFER_GROUP])
            self.pages = self._write_pages(self.pages, group, jax.device_put(data, self._placed))


def _store(kv: KVPages, written: Written) -> KVPages:
    pages, slots = written.pages, written.slots

    def heads_first(new: Array) -> Array:  # [B,T,K,H] -> [K,B,T,H], the pool's layout
        return jnp.moveaxis(new, 2, 0)

    return tuple(
        PagedLayerCache(
            c.k.at[:, pages, slots].set(to_pool(heads_first(written.new[i, 0]), c.k)),
            c.v.at[:, pages, slots].set(to_pool(heads_first(written.new[i, 1]), c.v)),
        )
        for i, c in enumerate(kv)
    )


def _copy_page(kv: KVPages, source: Array, target: Array) -> KVPages:
    return tuple(
        PagedLayerCache(c.k.at[:, target].set(c.k[:, source]), c.v.at[:, target].set(c.v[:, source])) for c in kv
    )


def _read_pages(kv: KVPages, pages: Array) -> Array:
    """[G, L, 2, K, page_size, H]: each page's keys and values over every layer, stored form."""
    return jnp.stack([jnp.stack([c.k[:, pages], c.v[:, pages]]) for c in kv]).transpose(3, 0, 1, 2, 4, 5)


def _write_pages(kv: KVPages, pages: Array, contents: Array) -> KVPages:
    layers = contents.transpose(1, 2, 3, 0, 4, 5)  # [L, 2, K, G, page_size, H]
    return tuple(
        PagedLayerCache(c.k.at[:, pages].set(layers[i, 0]), c.v.at[:, pages].set(layers[i, 1]))
        for i, c in enumerate(kv)
    )
