"""Qwen2-VL and Qwen2.5-VL: a Qwen2 decoder with M-RoPE and a vision tower (engine/model/layers/vision.py).

Checkpoints come in two layouts: the hub's (`model.layers…`, `visual.…`) and the one transformers
5 saves (`model.language_model.layers…`, `model.visual.…`); both are read. llama.cpp's split form
(a "qwen2vl" language GGUF and its mmproj GGUF) reads as the hub's layout
(engine/model/checkpoint/gguf_mmproj.py); the language GGUF alone serves text.
"""

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from engine.model.families.base import ParamTree, TensorSource
from engine.model.families.qwen2 import Qwen2
from engine.model.families.traits import FamilyTraits
from engine.model.model_config import ModelConfig
from engine.model.vision_config import VisionConfig


class _HubNames(Mapping[str, np.ndarray]):
    """A transformers-5 checkpoint's tensors under the hub's names."""

    def __init__(self, tensors: Mapping[str, np.ndarray]) -> None:
        self._tensors = tensors

    @staticmethod
    def _saved(name: str) -> str:
        if name.startswith("visual."):
            return f"model.{name}"
        if name.startswith("model."):
            return f"model.language_model.{name.removeprefix('model.')}"
        return name

    def __getitem__(self, name: str) -> np.ndarray:
        return self._tensors[self._saved(name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._saved(name) in self._tensors

    def __iter__(self) -> Iterator[str]:
        raise NotImplementedError("hub names are looked up, not listed")

    def __len__(self) -> int:
        return len(self._tensors)


class Qwen2VL(Qwen2):
    name = "qwen2_vl"
    hf_architectures = ("Qwen2VLForConditionalGeneration",)
    gguf_architecture = "qwen2vl"
    traits = FamilyTraits(qkv_bias=True, vision="qwen2_vl")

    def convert(self, tensors: Mapping[str, np.ndarray], config: ModelConfig) -> Iterator[tuple[str, Any]]:
        if "model.language_model.embed_tokens.weight" in tensors:
            tensors = _HubNames(tensors)
        yield from super().convert(tensors, config)
        if config.vision is not None:  # a language GGUF without its projector serves text
            yield "vision", self.convert_vision(TensorSource(tensors), config.vision)

    def convert_vision(self, get: TensorSource, v: VisionConfig) -> ParamTree:
        def dense(name: str) -> ParamTree:
            return {"kernel": get(f"{name}.weight").T, "bias": get(f"{name}.bias")}

        def norm(name: str) -> ParamTree:
            if v.generation == "qwen2_vl":
                return {"scale": get(f"{name}.weight"), "bias": get(f"{name}.bias")}
            return {"scale": get(f"{name}.weight")}

        conv = get(
            "visual.patch_embed.proj.weight",
            (v.width, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size),
        )
        tower: ParamTree = {"patch_embed": conv.reshape(v.width, -1).T}
        for i in range(v.depth):
            p = f"visual.blocks.{i}"
            block: ParamTree = {
                "norm1": norm(f"{p}.norm1"),
                "norm2": norm(f"{p}.norm2"),
                "qkv": dense(f"{p}.attn.qkv"),
                "proj": dense(f"{p}.attn.proj"),
            }
            if v.generation == "qwen2_vl":
                block |= {"fc1": dense(f"{p}.mlp.fc1"), "fc2": dense(f"{p}.mlp.fc2")}
            else:
                block |= {
                    "gate": dense(f"{p}.mlp.gate_proj"),
                    "up": dense(f"{p}.mlp.up_proj"),
                    "down": dense(f"{p}.mlp.down_proj"),
                }
            tower[f"block_{i}"] = block
        tower["merger_norm"] = norm("visual.merger.ln_q")
        tower["merger_in"] = dense("visual.merger.mlp.0")
        tower["merger_out"] = dense("visual.merger.mlp.2")
        return tower


class Qwen25VL(Qwen2VL):
    name = "qwen2_5_vl"
    hf_architectures = ("Qwen2_5_VLForConditionalGeneration",)
    traits = FamilyTraits(qkv_bias=True, vision="qwen2_5_vl")
