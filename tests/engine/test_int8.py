"""W8A8 (`--quantization w8a8`): the int8 matmul, the quantized parameter tree, and the engine on it."""

from collections.abc import Callable
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from engine.api import GenerationRequest
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.errors import CheckpointError
from engine.model import int8
from engine.model.loading.loader import load_model
from tests.engine.engine_harness import GREEDY, generate, greedy_request, reference_greedy, start

pytestmark = pytest.mark.slow  # builds engines


def test_int8_matmul_is_close_to_float_and_row_independent() -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((5, 64)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((64, 48)) * 0.05, jnp.float32)
    weight = int8.quantize(w, 1)
    assert weight.values.dtype == jnp.int8 and weight.values.shape == (48, 64)  # output-major
    assert weight.scale is not None and weight.scale.shape == (48,) and not weight.packed
    exact = np.asarray(x @ w)
    y = np.asarray(int8.matmul(x, weight))
    assert np.abs(y - exact).max() < 0.03 * np.abs(exact).max()
    # One row alone (padded to two inside) equals that row in a batch: int32 sums are exact.
    np.testing.assert_array_equal(np.asarray(int8.matmul(x[2:3], weight)), y[2:3])
    # A table [V, D] used as an output head: channels are its rows already, it stays as it is.
    table = int8.quantize(w.T, 1, channels_last=False)
    np.testing.assert_array_equal(np.asarray(table.values), np.asarray(weight.values))
    np.testing.assert_array_equal(np.asarray(table.scale), np.asarray(weight.scale))


def test_zero_rows_and_channels_stay_zero() -> None:
    weight = int8.quantize(jnp.zeros((8, 4)), 1)
    assert np.all(np.asarray(weight.scale) == 1.0)
    y = int8.matmul(jnp.zeros((1, 8)), weight)
    assert np.all(np.asarray(y) == 0.0)


@pytest.mark.parametrize("name", ["llama_linear", "llama_tied", "qwen2"])
def test_quantized_model_tracks_the_float_model(
    name: str, tiny_checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    floats = load_model(tiny_checkpoint(name), cache_dir=tmp_path, progress=False)
    quantized = load_model(tiny_checkpoint(name), cache_dir=tmp_path, progress=False, quantization="w8a8")
    assert quantized.from_cache  # the cache keeps the float parameters; quantizing happens at load
    kernel = quantized.params["layer_0"]["mlp"]["gate"]
    c = quantized.config
    assert kernel["kernel"].dtype == jnp.int8 and kernel["kernel"].shape == (c.intermediate_size, c.hidden_size)
    assert kernel["kernel_scale"].shape == (c.intermediate_size,)
    tokens = jnp.asarray(np.random.default_rng(1).integers(3, 256, (1, 24)), jnp.int32)
    positions = jnp.arange(24, dtype=jnp.int32)[None]
    expected = np.asarray(floats.forward(tokens, positions)[0])
    got = np.asarray(quantized.forward(tokens, positions)[0])
    assert np.abs(got - expected).max() < 0.1 * np.abs(expected).max()
    assert np.mean(got.argmax(-1) == expected.argmax(-1)) >= 0.75


def test_unknown_quantization_is_refused(tiny_checkpoint: Callable[[str], Path], tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="unsupported quantization 'int4'"):
        load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path, progress=False, quantization="int4")


def test_engine_on_the_quantized_model(tiny_checkpoint: Callable[[str], Path], tmp_path: Path) -> None:
    """The engine serves the int8 model as it serves any: its greedy tokens are the plain forward
    pass's, and batched rows get exactly what they get alone."""
    model = load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path, progress=False, quantization="w8a8")
    engine = Engine.build(model, EngineConfig(decode_lanes=4, page_size=8, prefill_chunk=8), lambda *_: None)
    try:
        prompts = [np.random.default_rng(seed).integers(3, 256, 11 + seed).tolist() for seed in range(3)]
        alone = [generate(engine, greedy_request(p, 6)).tokens[0] for p in prompts]
        assert alone[0] == reference_greedy(model, prompts[0], 6, 64)
        together = [start(engine, greedy_request(p, 6)) for p in prompts]
        assert [c.wait().tokens[0] for c in together] == alone
        shared = generate(engine, GenerationRequest(tuple(prompts[1]), GREEDY, 6, n=2))
        assert shared.tokens == [alone[1]] * 2
        assert engine.stats().compiles_after_startup == 0
    finally:
        engine.shutdown()
