"""The context `pooled serve` picks without --ctx: a short trained context is stretched by RoPE
scaling to what coding agents' prompts need, as far as the KV pool holds one full row."""

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.device.kv_sizing import kv_bytes_per_token, pool_pages
from engine.engine_config import EngineConfig
from engine.model.loading.loader import LoadedModel, load_model
from pooled.configuration.context_policy import AGENT_CONTEXT, served_context
from pooled.configuration.settings import Settings

CONFIG = EngineConfig(decode_lanes=4, page_size=16)


@pytest.fixture(scope="module")
def loaded(
    tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], LoadedModel]:
    cache = tmp_path_factory.mktemp("prepared")
    return lambda name: load_model(tiny_checkpoint(name), cache_dir=cache, progress=False)


def test_a_short_trained_context_is_extended_with_dynamic_ntk(loaded: Callable[[str], LoadedModel]) -> None:
    model = loaded("llama_tied")  # trained on 64 tokens
    context = served_context(model, Settings(), CONFIG)
    assert (context.trained, context.rope_scaling) == (64, "dynamic")
    assert context.model.config.context_length == AGENT_CONTEXT
    assert context.model.config.rope_scaling.kind == "dynamic"
    assert context.model.params is model.params  # the same weights, not a second load


def test_the_checkpoints_own_scaling_kind_extends_it(loaded: Callable[[str], LoadedModel]) -> None:
    context = served_context(loaded("llama_linear"), Settings(), CONFIG)
    assert context.rope_scaling == "linear" and context.model.config.context_length == AGENT_CONTEXT


def test_the_extension_stops_where_the_kv_pool_does(loaded: Callable[[str], LoadedModel]) -> None:
    model = loaded("llama_tied")
    per_token = kv_bytes_per_token(model, CONFIG.kv_cache_dtype)
    pages = 1 + CONFIG.decode_lanes + 1000 // CONFIG.page_size  # the null page, a page a lane, ~1000 tokens
    small = EngineConfig(decode_lanes=4, page_size=16, kv_memory_bytes=pages * CONFIG.page_size * per_token)
    context = served_context(model, Settings(), small)
    ctx = context.model.config.context_length
    assert context.rope_scaling == "dynamic" and 64 < ctx < AGENT_CONTEXT
    # One full row beside a page a lane fits (the engine's own check), a page more would not.
    pages = pool_pages(context.model, small)
    assert ctx // 16 + small.decode_lanes + 1 <= pages < ctx // 16 + 1 + small.decode_lanes + 1

    tiny = EngineConfig(decode_lanes=4, page_size=16, kv_memory_bytes=(1 + 4 + 2) * 16 * per_token)
    unextended = served_context(model, Settings(), tiny)  # 32 tokens would fit: below the trained 64
    assert unextended.rope_scaling is None and unextended.model is model


def test_an_explicit_ctx_is_kept(
    loaded: Callable[[str], LoadedModel], tiny_checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    model = loaded("llama_tied")
    context = served_context(model, Settings(ctx=64), CONFIG)
    assert context.model is model and (context.trained, context.rope_scaling) == (64, None)
    settings = Settings(ctx=256, rope_scaling="yarn")
    stretched = load_model(
        tiny_checkpoint("llama_tied"), cache_dir=tmp_path, progress=False, context_length=256, rope_scaling="yarn"
    )
    context = served_context(stretched, settings, CONFIG)
    assert context.model is stretched and (context.trained, context.rope_scaling) == (64, "yarn")
