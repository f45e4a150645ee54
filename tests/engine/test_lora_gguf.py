"""llama.cpp LoRA GGUF adapters (engine/lora/gguf_adapter.py): each tiny PEFT adapter converted
as llama.cpp's converter would (tests/engine/tiny_gguf_lora.py) reads into the pairs the PEFT
reader gives, in every float type the converter writes; the scale is llama.cpp's; and each file
the engine would not compute as llama.cpp does is refused. The logits are checked in
tests/engine/test_lora.py."""

import math
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from engine.errors import CheckpointError
from engine.lora.adapter_formats import read_lora_adapter
from engine.lora.peft_adapter import LoraAdapter, file_sha256, read_peft_adapter
from engine.model.families.registry import decoder_for_hf_config
from engine.model.model_config import ModelConfig
from tests.engine.tiny_checkpoints import TINY_MODELS
from tests.engine.tiny_gguf_lora import converted_tensors, write_adapter_gguf, write_lora_gguf
from tests.engine.tiny_lora import TINY_ADAPTERS, build_tiny_adapter


def config_of(adapter: str) -> ModelConfig:
    hf = TINY_MODELS[TINY_ADAPTERS[adapter][0]]
    return decoder_for_hf_config(hf).config(hf)


def convert(name: str, tmp_path: Path, outtype: str = "f32") -> tuple[Path, Path]:
    """The PEFT directory of tiny adapter `name` and its GGUF."""
    directory = build_tiny_adapter(name, tmp_path / name)
    return directory, write_lora_gguf(
        directory, TINY_MODELS[TINY_ADAPTERS[name][0]], tmp_path / f"{name}.gguf", outtype
    )


def assert_same_pairs(gguf: LoraAdapter, peft: LoraAdapter, tolerance: float = 0.0, b_factor: float = 1.0) -> None:
    assert gguf.pairs.keys() == peft.pairs.keys()
    for key, pair in peft.pairs.items():
        np.testing.assert_allclose(gguf.pairs[key].a, pair.a, atol=tolerance, rtol=0)
        np.testing.assert_allclose(gguf.pairs[key].b, pair.b * np.float32(b_factor), atol=tolerance, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(set(TINY_ADAPTERS) - {"llama_qv_rslora"}))
def test_a_converted_adapter_reads_as_its_peft_directory_does(name: str, tmp_path: Path) -> None:
    directory, path = convert(name, tmp_path)
    config = config_of(name)
    gguf, peft = read_lora_adapter(path, config), read_peft_adapter(directory, config)
    assert (gguf.rank, gguf.alpha, gguf.scale, gguf.targets) == (peft.rank, peft.alpha, peft.scale, peft.targets)
    assert gguf.path == path and gguf.size_bytes == path.stat().st_size and gguf.sha256 == file_sha256(path)
    for key, pair in peft.pairs.items():  # float32 as stored: bit for bit, q/k rows back in HF's order
        np.testing.assert_array_equal(gguf.pairs[key].a, pair.a)
        np.testing.assert_array_equal(gguf.pairs[key].b, pair.b)
    assert gguf.pairs.keys() == peft.pairs.keys()


@pytest.mark.parametrize(
    ("outtype", "types", "tolerance"),
    [
        ("f16", {"F16"}, 1e-3),
        ("bf16", {"BF16"}, 1e-2),
        ("q8_0", {"Q8_0", "F16"}, 5e-3),  # lora_b's rows (r = 4) are shorter than a Q8_0 block: f16
    ],
)
def test_the_converters_other_types_dequantize(outtype: str, types: set[str], tolerance: float, tmp_path: Path) -> None:
    directory, path = convert("llama_all", tmp_path, outtype)
    assert {tensor.tensor_type.name for tensor in GGUFReader(path).tensors} == types
    config = config_of("llama_all")
    assert_same_pairs(read_lora_adapter(path, config), read_peft_adapter(directory, config), tolerance)


def test_rslora_is_scaled_as_llama_cpp_does_alpha_over_rank(tmp_path: Path) -> None:
    # The converter writes lora_alpha alone; llama.cpp scales by alpha / r whatever use_rslora was.
    directory, path = convert("llama_qv_rslora", tmp_path)
    config = config_of("llama_qv_rslora")
    gguf, peft = read_lora_adapter(path, config), read_peft_adapter(directory, config)
    assert (gguf.rank, gguf.alpha, gguf.scale) == (8, 4.0, 0.5) and peft.scale == pytest.approx(4 / math.sqrt(8))
    assert_same_pairs(gguf, peft, b_factor=gguf.scale / peft.scale)


def test_without_alpha_the_pairs_are_unscaled_as_llama_cpp_applies_them(tmp_path: Path) -> None:
    directory, _ = convert("llama_all", tmp_path)
    tensors = converted_tensors(directory, TINY_MODELS["llama_tied"])
    path = write_adapter_gguf(tmp_path / "no-alpha.gguf", "llama", tensors, alpha=None)
    config = config_of("llama_all")
    gguf, peft = read_lora_adapter(path, config), read_peft_adapter(directory, config)
    assert (gguf.alpha, gguf.scale) == (0.0, 1.0)
    assert_same_pairs(gguf, peft, b_factor=1 / peft.scale)


def _llama_gguf(tmp_path: Path, change: dict | None = None, drop: str | None = None, **options: object) -> Path:
    """llama_all's GGUF with tensors `change`d (None: removed) or `drop`ped, and writer `options`."""
    tensors = converted_tensors(build_tiny_adapter("llama_all", tmp_path / "peft"), TINY_MODELS["llama_tied"])
    tensors = {name: tensor for name, tensor in (tensors | (change or {})).items() if name != drop}
    arguments: dict = {"arch": "llama", "alpha": 8.0} | options
    return write_adapter_gguf(tmp_path / "broken.gguf", tensors=tensors, **arguments)


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        ({"general_type": "model"}, r"not a LoRA adapter \(general.type 'model'\)"),
        ({"adapter_type": "control_vector"}, r"not a LoRA adapter \(adapter.type 'control_vector'\)"),
        ({"arch": "gpt2"}, "adapter architecture 'gpt2' is not supported"),
        ({"arch": "qwen2"}, "an adapter for 'qwen2' models; the served model is 'llama'"),
        ({"extra": [("adapter.alora.invocation_tokens", [5, 6])]}, "activated LoRA"),
        ({"drop": "blk.1.attn_v.weight.lora_a"}, "layer 1 v: lora_a is missing"),
        ({"drop": "blk.0.ffn_down.weight.lora_b"}, "layer 0 down: lora_b is missing"),
        (
            {"change": {"token_embd.weight.lora_a": np.zeros((4, 256), np.float32)}},
            "tensor token_embd.weight.lora_a is not a LoRA pair of a decoder projection",
        ),
        (
            {"change": {"blk.0.attn_norm.weight": np.ones(64, np.float32)}},  # mergekit's norms
            "tensor blk.0.attn_norm.weight is not a LoRA pair",
        ),
        (
            {"change": {"blk.2.attn_q.weight.lora_a": np.zeros((4, 64), np.float32)}},
            "layer 2 q: the served model has 2 layers",
        ),
        (
            {"change": {"blk.0.attn_v.weight.lora_a": np.zeros((4, 32), np.float32)}},
            r"layer 0 v: lora_a \[4, 32\] and lora_b \[32, 4\] do not fit the served model "
            r"\(rank 4: \[4, 64\] and \[32, 4\]\)",
        ),
        (
            {
                "change": {
                    "blk.0.attn_v.weight.lora_a": np.zeros((8, 64), np.float32),
                    "blk.0.attn_v.weight.lora_b": np.zeros((32, 8), np.float32),
                }
            },
            r"pairs of different ranks \(4, 8\) are not supported",
        ),
        (
            {"change": {"blk.0.attn_q.weight.lora_a": np.zeros((4, 64), np.int32)}},
            "tensor blk.0.attn_q.weight.lora_a has type I32; supported: BF16, F16, F32",
        ),
    ],
)
def test_a_file_the_engine_would_not_compute_as_llama_cpp_does_is_refused(
    broken: dict, reason: str, tmp_path: Path
) -> None:
    with pytest.raises(CheckpointError, match=reason):
        read_lora_adapter(_llama_gguf(tmp_path, **broken), config_of("llama_all"))


def test_a_path_that_is_neither_kind_of_adapter_is_refused_naming_both(tmp_path: Path) -> None:
    needed = r"\(a PEFT adapter directory or a llama.cpp LoRA GGUF file is needed\)"
    directory, _ = convert("llama_all", tmp_path)
    with pytest.raises(CheckpointError, match=f"not a .gguf file {needed}"):
        read_lora_adapter(directory / "adapter_model.safetensors", config_of("llama_all"))
    with pytest.raises(CheckpointError, match=f"no such file or directory {needed}"):
        read_lora_adapter(tmp_path / "missing.gguf", config_of("llama_all"))
    (tmp_path / "fake.gguf").write_bytes(b"GGML" + bytes(40))
    with pytest.raises(CheckpointError, match="not a GGUF file"):
        read_lora_adapter(tmp_path / "fake.gguf", config_of("llama_all"))
