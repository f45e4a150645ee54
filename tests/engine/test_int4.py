"""W4A8 (`--quantization w4a8`): Q4_1 weights (engine/model/int4.py), the parameter tree, which path a
step takes, and the engine on it. (The native kernel against its definition: test_kernels.py.)"""

from collections.abc import Callable
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model import int4, int8, kernels
from engine.model.families.llama.llama import Llama
from engine.model.loading.loader import load_model, resolve_quantization
from engine.model.sharding import make_mesh
from tests.engine.engine_harness import generate, greedy_request, start

pytestmark = pytest.mark.slow  # builds engines


def test_packing_finds_a_q4_1_files_own_blocks() -> None:
    """Weights that are Q4_1 already (as a GGUF's, dequantized) come back with the same codes,
    scales and minimums: serving them adds no weight error."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, (16, 4, 32))
    codes[..., 0], codes[..., 1] = 0, 15  # llama.cpp's Q4_1 maps each block's min and max to 0 and 15
    scales = rng.uniform(0.001, 0.05, (16, 4)).astype(np.float16)
    mins = (-rng.uniform(0.0, 0.4, (16, 4))).astype(np.float16)
    floats = codes * scales[..., None].astype(np.float32) + mins[..., None].astype(np.float32)
    packed = int4.pack(jnp.asarray(floats.reshape(16, 128), jnp.float32))
    assert packed.dtype == jnp.uint8 and packed.shape == (16, 4 * int4.BLOCK_BYTES)
    np.testing.assert_array_equal(np.asarray(int4.unpack(packed)), floats.reshape(16, 128))
    # The layout (engine/model/int4.py): per group of 8 channels, per block, per 8 inputs, 4 bytes per
    # channel (input j low, j + 4 high); then the group's 8 scales, then its 8 minimums (f16).
    group, block, step, channel, j = 1, 2, 1, 3, 2
    stored = np.asarray(packed).reshape(2, 4, 8 * int4.BLOCK_BYTES)[group, block]
    codes_of = codes[8 * group + channel, block]
    assert stored[:128].reshape(4, 8, 4)[step, channel, j] == codes_of[8 * step + j] | codes_of[8 * step + j + 4] << 4
    assert stored[128:144].view(np.float16)[channel] == scales[8 * group + channel, block]
    assert stored[144:160].view(np.float16)[channel] == mins[8 * group + channel, block]
    got_codes, got_scales, got_mins = (np.asarray(a) for a in int4.fields(packed))
    np.testing.assert_array_equal(got_codes, codes)
    np.testing.assert_array_equal(got_scales, scales)
    np.testing.assert_array_equal(got_mins, mins)


def test_a_q4_1_files_rows_move_into_the_layout_that_packing_their_floats_gives() -> None:
    """A GGUF's Q4_1 rows (as llama.cpp's reference quantizer writes them) moved into the layout
    byte for byte as `pack` of their dequantized floats: w4a8 serves a Q4_1 file without
    dequantizing it."""
    rng = np.random.default_rng(2)
    floats = rng.standard_t(3, (16, 96)).astype(np.float32)
    floats[3, 32:64] = 0.25  # a constant block: scale 0
    rows = quants.quantize(floats, GGMLQuantizationType.Q4_1)
    assert rows.dtype == np.uint8 and rows.shape == (16, 3 * int4.BLOCK_BYTES)
    dequantized = quants.dequantize(rows, GGMLQuantizationType.Q4_1).astype(np.float32)
    np.testing.assert_array_equal(int4.from_q4_1_rows(rows), np.asarray(int4.pack(jnp.asarray(dequantized))))


def test_packing_rounds_any_weights_to_half_a_step() -> None:
    rng = np.random.default_rng(1)
    floats = rng.standard_t(3, (2, 8, 256)).astype(np.float32)  # leading axes: groups stay within the last
    packed = int4.pack(jnp.asarray(floats))
    error = np.abs(np.asarray(int4.unpack(packed)) - floats).reshape(2, 8, 8, 32)
    step = np.asarray(int4.fields(packed)[1], np.float32)[..., None]
    assert np.all(error <= step / 2 + 1e-3 * step + 1e-6)
    # A constant block has scale 0 and decodes exactly (to its f16 minimum).
    flat = np.full((8, 64), 0.5, np.float32)
    np.testing.assert_array_equal(np.asarray(int4.unpack(int4.pack(jnp.asarray(flat)))), flat)


def test_only_whole_groups_of_channels_and_blocks_are_packed() -> None:
    assert int4.packable(16, 96)
    assert not int4.packable(12, 96)
    assert not int4.packable(16, 80)


def test_prompts_and_steps_run_one_q4_function_with_independent_rows() -> None:
    """With the native kernels every x [B, T, K] takes the Q4 kernel, whose rows do not depend on
    each other (a prompt's token gets what a one-token step gets); XLA's path (no kernels) runs
    the weights rounded to int8."""
    rng = np.random.default_rng(2)
    w = jnp.asarray(rng.standard_normal((128, 40)), jnp.float32)
    weight = int8.quantize(w, 1, packed=True)
    x = jnp.asarray(rng.standard_normal((3, 5, 128)), jnp.float32)
    prompt = np.asarray(int8.matmul(x, weight))
    step = np.asarray(int8.matmul(x[:, 2:3], weight))
    np.testing.assert_array_equal(step[:, 0], prompt[:, 2])
    np.testing.assert_array_equal(np.asarray(int8.matmul(x[1:2, :1], weight))[0], prompt[1, :1])
    exact = np.asarray(x @ w)
    assert np.abs(prompt - exact).max() < 0.15 * np.abs(exact).max()
    rounded = np.asarray(int8.xla_matmuls(x.reshape(15, 128), [weight])[0]).reshape(3, 5, 40)
    np.testing.assert_array_equal(rounded, np.asarray(int8.matmul(x, int8.Weight(*weight.int8()))))
    if kernels.available():
        assert not np.array_equal(prompt, rounded)  # the kernel ran
    else:
        np.testing.assert_array_equal(prompt, rounded)


@pytest.mark.parametrize("name", ["llama_linear", "llama_tied"])
def test_packed_model_tracks_the_float_model(name: str, tiny_checkpoint: Callable[[str], Path], tmp_path: Path) -> None:
    floats = load_model(tiny_checkpoint(name), cache_dir=tmp_path, progress=False)
    packed = load_model(tiny_checkpoint(name), cache_dir=tmp_path, progress=False, quantization="w4a8")
    c = packed.config
    gate = packed.params["layer_0"]["mlp"]["gate"]
    assert gate["kernel"].dtype == jnp.uint8 and set(gate) == {"kernel"}  # one array, no scale of its own
    assert gate["kernel"].shape == (c.intermediate_size, int4.packed_bytes(c.hidden_size))
    assert packed.params["layer_0"]["attn"]["o"]["kernel"].shape == (
        c.hidden_size,
        int4.packed_bytes(c.num_heads * c.head_dim),
    )
    assert packed.params["embed"]["embedding"].dtype == jnp.int8  # the embedding and head stay int8
    if not c.tie_word_embeddings:
        assert packed.params["lm_head"].dtype == jnp.int8
    tokens = jnp.asarray(np.random.default_rng(1).integers(3, 256, (1, 24)), jnp.int32)
    positions = jnp.arange(24, dtype=jnp.int32)[None]
    expected = np.asarray(floats.forward(tokens, positions)[0])
    got = np.asarray(packed.forward(tokens, positions)[0])
    # Random weights have no structure for 16 levels to keep (here correlation 0.95-0.97, the same
    # next token at 54-75 % of positions, against 1/256 by chance); real models: docs/BENCHMARKS.md.
    assert np.corrcoef(got.ravel(), expected.ravel())[0, 1] > 0.9
    assert np.mean(got.argmax(-1) == expected.argmax(-1)) >= 0.5


def test_engine_on_the_packed_model(tiny_checkpoint: Callable[[str], Path], tmp_path: Path) -> None:
    """Batched rows get exactly what they get alone, twelve of them as well as one."""
    model = load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path, progress=False, quantization="w4a8")
    lanes = 12
    engine = Engine.build(model, EngineConfig(decode_lanes=lanes, page_size=8, prefill_chunk=8), lambda *_: None)
    try:
        prompts = [np.random.default_rng(seed).integers(3, 256, 5 + seed).tolist() for seed in range(lanes)]
        alone = [generate(engine, greedy_request(p, 5)).tokens[0] for p in prompts[:3]]
        together = [start(engine, greedy_request(p, 5)) for p in prompts]
        assert [c.wait().tokens[0] for c in together][:3] == alone
        assert engine.stats().compiles_after_startup == 0
    finally:
        engine.shutdown()


def test_auto_serves_a_gguf_files_own_blocks_where_the_kernels_run() -> None:
    mesh = make_mesh(None)
    native = kernels.available()
    llama = Llama()

    def auto(projections: str | None, matrices: list[str]) -> str:
        return resolve_quantization({"projection_blocks": projections, "matrix_formats": matrices}, llama, mesh)

    assert auto("Q4_1", ["Q4_1", "Q8_0"]) == ("w4a8" if native else "none")
    # Not requantized (w8a8 would round per channel): the file's own blocks.
    assert auto("Q8_0", ["Q8_0"]) == ("gguf" if native else "none")
    assert auto(None, ["Q4_K", "Q5_0", "Q6_K", "Q8_0"]) == ("gguf" if native else "none")  # a Q4_K_M mixture
    assert auto(None, ["F16", "Q4_K"]) == "none"  # a matrix the kernels do not compute with
    assert auto(None, []) == "none"  # safetensors
