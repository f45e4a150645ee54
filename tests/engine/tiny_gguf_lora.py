"""A tiny PEFT adapter (tests/engine/tiny_lora.py) written as a LoRA GGUF the way llama.cpp's
`convert_lora_to_gguf.py` writes one: `general.type` "adapter", `adapter.type` "lora", the
adapter's `lora_alpha` as `adapter.lora.alpha` (and nothing of `use_rslora`), the base model's
architecture, and each pair as `<gguf-py's name for the base weight>.lora_a` / `.lora_b`, PEFT's
A [r, in] and B [out, r] as they are, except that for Llama the converter's q/k permutation
(`LlamaModel.permute`, k with the KV heads) reorders B's rows. `--outtype` f16 and bf16 store
both halves in that type; q8_0 falls back to f16 for a half whose rows do not fill Q8_0 blocks
(lora_b's rows are r long), as the converter's `QuantError` fallback does."""

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType
from safetensors.numpy import load_file

ARCHITECTURES = {
    "LlamaForCausalLM": gguf.MODEL_ARCH.LLAMA,
    "Qwen2ForCausalLM": gguf.MODEL_ARCH.QWEN2,
    "Qwen3ForCausalLM": gguf.MODEL_ARCH.QWEN3,
    "Qwen3MoeForCausalLM": gguf.MODEL_ARCH.QWEN3MOE,
}
OUTTYPES = {"f32": GGMLQuantizationType.F32, "f16": GGMLQuantizationType.F16}
OUTTYPES |= {"bf16": GGMLQuantizationType.BF16, "q8_0": GGMLQuantizationType.Q8_0}

Tensors = dict[str, np.ndarray]


def llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's converter does to llama q/k rows (see its `LlamaModel.permute`)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def converted_tensors(directory: Path, base_config: dict[str, Any]) -> Tensors:
    """The adapter's tensors under the converter's GGUF names, float32, q/k B rows permuted for Llama."""
    arch = ARCHITECTURES[base_config["architectures"][0]]
    names = gguf.get_tensor_name_map(arch, base_config["num_hidden_layers"])
    heads, kv_heads = base_config["num_attention_heads"], base_config["num_key_value_heads"]
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for name, tensor in load_file(str(directory / "adapter_model.safetensors")).items():
        base = name.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        pairs.setdefault(base.replace(".lora_B.weight", ".weight"), {})["A" if ".lora_A." in name else "B"] = tensor
    tensors = {}
    for base, pair in pairs.items():
        b = pair["B"]
        if arch == gguf.MODEL_ARCH.LLAMA and base.endswith("q_proj.weight"):
            b = llama_cpp_permute(b, heads)
        if arch == gguf.MODEL_ARCH.LLAMA and base.endswith("k_proj.weight"):
            b = llama_cpp_permute(b, kv_heads)
        gguf_name = names.get_name(base, try_suffixes=(".weight",))
        assert gguf_name is not None, base
        tensors[f"{gguf_name}.lora_a"], tensors[f"{gguf_name}.lora_b"] = pair["A"], b
    return tensors


def write_adapter_gguf(
    out: Path,
    arch: str,
    tensors: Tensors,
    alpha: float | None,
    outtype: str = "f32",
    general_type: str = gguf.GGUFType.ADAPTER,
    adapter_type: str = "lora",
    extra: Iterable[tuple[str, Any]] = (),
) -> Path:
    """A GGUF adapter file: what the converter writes for these arguments' defaults; the others
    make broken ones (alpha None: no alpha key; `extra`: more metadata)."""
    writer = gguf.GGUFWriter(out, arch)
    writer.add_type(general_type)
    writer.add_string(gguf.Keys.Adapter.TYPE, adapter_type)
    if alpha is not None:
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    for key, value in extra:
        if isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_string(key, value)
    for name, tensor in tensors.items():
        if tensor.dtype != np.float32:  # a non-float tensor, stored as it is
            writer.add_tensor(name, tensor)
            continue
        qtype = OUTTYPES[outtype]
        try:
            data = tensor if qtype == GGMLQuantizationType.F32 else gguf.quants.quantize(tensor, qtype)
        except gguf.QuantError:
            qtype, data = GGMLQuantizationType.F16, gguf.quants.quantize(tensor, GGMLQuantizationType.F16)
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def write_lora_gguf(directory: Path, base_config: dict[str, Any], out: Path, outtype: str = "f32") -> Path:
    """The PEFT adapter in `directory`, for the model of HF config `base_config`, as GGUF `out`."""
    settings = json.loads((directory / "adapter_config.json").read_text())
    arch = gguf.MODEL_ARCH_NAMES[ARCHITECTURES[base_config["architectures"][0]]]
    tensors = converted_tensors(directory, base_config)
    return write_adapter_gguf(out, arch, tensors, float(settings["lora_alpha"]), outtype)
