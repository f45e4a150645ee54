"""The KV pool's default size where the device reports no memory figures (XLA's CPU backend):
every lane's full context and no more, as llama-server's cache holds its slots', at most 2 GiB."""

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.device.kv_sizing import NO_FIGURES_KV_MEMORY, kv_bytes_per_token, pool_pages, row_capacity
from engine.engine_config import EngineConfig
from engine.model.loading.loader import LoadedModel, load_model


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


@pytest.mark.parametrize("ctx", [64, 100])
def test_the_pool_holds_every_lanes_full_context_and_a_private_page_each(model: LoadedModel, ctx: int) -> None:
    config = EngineConfig(decode_lanes=4, page_size=16, max_context=ctx)
    pages = pool_pages(model, config)
    row_pages = -(-ctx // 16)
    assert pages == 4 * (row_pages + 1) + 1  # the null page beside them
    assert row_capacity(pages, 4, 16) == 4 * row_pages * 16 >= ctx


def test_the_default_pool_stops_at_2_gib(model: LoadedModel) -> None:
    config = EngineConfig(decode_lanes=64, page_size=16, max_context=1 << 20)
    page_bytes = 16 * kv_bytes_per_token(model, config.kv_cache_dtype)
    assert pool_pages(model, config) == NO_FIGURES_KV_MEMORY // page_bytes + 1
