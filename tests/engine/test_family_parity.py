"""Every family (and every RoPE scaling kind) matches transformers' float32 logits."""

from collections.abc import Callable
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from engine.model.loading.loader import load_model
from tests.engine.tiny_checkpoints import TINY_MODELS

pytestmark = pytest.mark.slow  # each family's model against transformers' goldens, through XLA


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
def test_float32_logits_match_transformers(
    name: str, tiny_checkpoint: Callable[[str], Path], cache_dir: Path, golden: Callable[[str], dict]
) -> None:
    expected = golden(name)
    model = load_model(tiny_checkpoint(name), cache_dir=cache_dir, progress=False)
    logits, cache = model.forward(expected["tokens"], expected["positions"])
    assert cache is None
    assert logits.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(logits), expected["logits"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["llama_tied", "qwen3_moe"])
def test_bfloat16_is_close_to_float32(
    name: str, tiny_checkpoint: Callable[[str], Path], cache_dir: Path, golden: Callable[[str], dict]
) -> None:
    expected = golden(name)
    model = load_model(tiny_checkpoint(name), dtype="bfloat16", cache_dir=cache_dir, progress=False)
    assert model.params["final_norm"]["scale"].dtype == jnp.bfloat16
    logits, _ = model.forward(expected["tokens"], expected["positions"])
    assert logits.dtype == jnp.float32
    error = np.abs(np.asarray(logits) - expected["logits"])
    assert error.mean() < 0.05 * np.abs(expected["logits"]).mean()
    agreement = np.mean(np.argmax(np.asarray(logits), -1) == np.argmax(expected["logits"], -1))
    assert agreement >= 0.9


@pytest.mark.parametrize("name", ["llama_yarn", "qwen3_moe"])
def test_cached_decode_matches_full_forward(
    name: str, tiny_checkpoint: Callable[[str], Path], cache_dir: Path, golden: Callable[[str], dict]
) -> None:
    expected = golden(name)
    tokens, positions = expected["tokens"], expected["positions"]
    model = load_model(tiny_checkpoint(name), cache_dir=cache_dir, progress=False)
    kv_cache = model.init_kv_cache(batch=tokens.shape[0], length=16)
    prefill = 8
    logits, kv_cache = model.forward(tokens[:, :prefill], positions[:, :prefill], kv_cache)
    steps = [logits]
    for t in range(prefill, tokens.shape[1]):
        logits, kv_cache = model.forward(tokens[:, t : t + 1], positions[:, t : t + 1], kv_cache)
        steps.append(logits)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), expected["logits"], atol=1e-4, rtol=0)


def test_context_extension_through_load_model(
    tiny_checkpoint: Callable[[str], Path], cache_dir: Path, golden: Callable[[str], dict]
) -> None:
    expected = golden("llama_tied")
    model = load_model(
        tiny_checkpoint("llama_tied"), cache_dir=cache_dir, progress=False, context_length=256, rope_scaling="yarn"
    )
    assert model.config.context_length == 256 and model.config.rope_scaling.factor == 4.0
    logits, _ = model.forward(expected["tokens"], expected["positions"])
    assert np.isfinite(np.asarray(logits)).all()
    assert not np.allclose(np.asarray(logits), expected["logits"], atol=1e-2)  # YaRN really changed the rotation
