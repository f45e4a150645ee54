"""Read a llama.cpp LoRA GGUF file (what its `convert_lora_to_gguf.py` writes from a PEFT adapter)
into the `LoraAdapter` the PEFT reader (engine/lora/peft_adapter.py) gives for that adapter.

Such a file says `general.type = "adapter"` and `adapter.type = "lora"`, names the base model's
`general.architecture`, and holds one pair per targeted projection, `blk.N.<part>.weight.lora_a`
[r, in] and `.lora_b` [out, r] (numpy order; ggml's `ne` is the reverse): PEFT's A and B as
stored, in the file's tensor type (f32, f16, bf16 or q8_0). llama.cpp computes `scale · B(A(x))`
with `scale = adapter.lora.alpha / r`, r taken from lora_b, and `scale = 1` when the file has no
alpha (or 0). The converter copies `lora_alpha` alone: an adapter trained with `use_rslora` gets
`alpha / r` as llama.cpp runs it, not PEFT's `alpha / sqrt(r)`, and so it does here. For the
families whose q and k rows the converter interleaves (`FamilyTraits.gguf_interleaved_qk`), its
permutation lands on lora_b's rows; they are put back as the model reader puts back the base
weights' rows.

Refused by name: a file that is not a LoRA adapter, an adapter for another architecture, activated
LoRA (invocation tokens), tensors other than those pairs (embeddings, output head, experts,
norms), a missing half, pairs of different ranks, tensor types without a dequantizer, and shapes
that do not fit the served model.
"""

import re
from pathlib import Path

import numpy as np
from gguf.quants import dequantize

from engine.errors import CheckpointError
from engine.lora.peft_adapter import TARGETS, LoraAdapter, build_adapter
from engine.model.checkpoint.gguf_file import (
    BLOCK_TENSORS,
    check_tensor_type,
    unpermute_qk_rows,
)
from engine.model.checkpoint.gguf_header import GGUFHeader, open_reader, reader_metadata
from engine.model.families.family import DecoderFamily
from engine.model.families.registry import DECODERS, GGUF_DECODERS
from engine.model.model_config import ModelConfig

ALPHA_KEY = "adapter.lora.alpha"
ALORA_KEY = "adapter.alora.invocation_tokens"
# llama.cpp block tensor → the engine's projection, through the model reader's GGUF → HF names.
PROJECTIONS = {
    part: TARGETS[module][1]
    for part, hf_name in BLOCK_TENSORS.items()
    if (module := hf_name.rpartition(".")[2]) in TARGETS
}
_TENSOR = re.compile(r"blk\.(?P<layer>\d+)\.(?P<part>\w+)\.weight\.lora_(?P<half>[ab])")
_IDENTITY = (("general.type", "adapter"), ("adapter.type", "lora"))


def read_gguf_adapter(path: Path, config: ModelConfig) -> LoraAdapter:
    """The LoRA adapter in GGUF file `path`, checked against `config`; CheckpointError with the reason."""
    reader = open_reader(path)
    metadata = reader_metadata(reader, path)
    for key, expected in _IDENTITY:
        if metadata.get(key) != expected:
            raise CheckpointError(f"{path}: not a LoRA adapter ({key} {metadata.get(key)!r})")
    if ALORA_KEY in metadata:
        raise CheckpointError(f"{path}: activated LoRA ({ALORA_KEY}) is not supported")
    family = _family(metadata.get("general.architecture"), path, config)
    alpha = metadata.get(ALPHA_KEY, 0.0)
    if not isinstance(alpha, int | float) or isinstance(alpha, bool):
        raise CheckpointError(f"{path}: {ALPHA_KEY} {alpha!r} is not a number")
    halves = _halves(reader, path)
    rank = _rank(halves, path)
    if family.traits.gguf_interleaved_qk:
        _unpermute(halves, config)
    scale = float(alpha) / rank if alpha else 1.0  # llama.cpp's llama_adapter_lora_weight::get_scale
    return build_adapter(path, path, halves, rank, float(alpha), scale, config, half_names=("lora_a", "lora_b"))


def _family(arch: object, path: Path, config: ModelConfig) -> DecoderFamily:
    family = GGUF_DECODERS.get(str(arch))
    if family is None:
        raise CheckpointError(
            f"{path}: adapter architecture {arch!r} is not supported; supported: {', '.join(GGUF_DECODERS)}"
        )
    # llama.cpp refuses an adapter of another architecture; so does this reader where the served
    # model's type names a family (a Mistral model's "mistral" does not: shapes are checked alone).
    served = next((f for f in DECODERS if f.name == config.model_type), None)
    if served is not None and served is not family:
        raise CheckpointError(f"{path}: an adapter for {arch!r} models; the served model is {config.model_type!r}")
    return family


def _halves(reader: GGUFHeader, path: Path) -> dict[tuple[int, str], dict[str, np.ndarray]]:
    halves: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for tensor in reader.tensors:
        match = _TENSOR.fullmatch(tensor.name)
        if match is None or match["part"] not in PROJECTIONS:
            raise CheckpointError(f"{path}: tensor {tensor.name} is not a LoRA pair of a decoder projection")
        check_tensor_type(tensor, path)
        # A copy: the pairs outlive the memory-mapped file.
        weights = np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        halves.setdefault((int(match["layer"]), PROJECTIONS[match["part"]]), {})[match["half"].upper()] = weights
    return halves


def _rank(halves: dict[tuple[int, str], dict[str, np.ndarray]], path: Path) -> int:
    """The adapter's one rank, lora_b's last axis as llama.cpp takes it (lora_a's first without one)."""
    ranks = {half["B"].shape[-1] for half in halves.values() if "B" in half and half["B"].ndim == 2}
    ranks = ranks or {half["A"].shape[0] for half in halves.values() if "A" in half and half["A"].ndim == 2}
    if len(ranks) > 1:
        raise CheckpointError(
            f"{path}: pairs of different ranks ({', '.join(map(str, sorted(ranks)))}) are not supported"
        )
    return ranks.pop() if ranks else 1


def _unpermute(halves: dict[tuple[int, str], dict[str, np.ndarray]], config: ModelConfig) -> None:
    """lora_b's q and k rows back in HF's order; a lora_b of another shape is left for the shape check."""
    for (_, projection), half in halves.items():
        heads = {"q": config.num_heads, "k": config.num_kv_heads}.get(projection)
        b = half.get("B")
        if heads is not None and b is not None and b.ndim == 2 and b.shape[0] == heads * config.head_dim:
            half["B"] = unpermute_qk_rows(b, heads)
