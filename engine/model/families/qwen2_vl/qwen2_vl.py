"""Qwen2-VL and Qwen2.5-VL: a Qwen2 decoder with M-RoPE and a vision tower (vision_tower.py).

Checkpoints come in two layouts: the hub's (`model.layers…`, `visual.…`) and the one transformers
5 saves (`model.language_model.layers…`, `model.visual.…`); both are read. llama.cpp's split form
(a "qwen2vl" language GGUF and its mmproj GGUF) reads as the hub's layout (gguf_mmproj.py); the
language GGUF alone serves text.
"""

from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.model.checkpoint.raw import RawCheckpoint
from engine.model.families.family import TEXT, Input, ParamTree, Task, TensorSource
from engine.model.families.qwen2.qwen2 import Qwen2
from engine.model.families.qwen2_vl.gguf_mmproj import with_mmproj
from engine.model.families.qwen2_vl.vision_tower import VisionConfig
from engine.model.model_config import ModelConfig


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
    serves: ClassVar[Mapping[Task, tuple[Input, ...]]] = {"generate": ("text", "image"), "embed": TEXT}
    generation: ClassVar[str] = "qwen2_vl"  # the tower's (`VisionConfig.generation`)

    def config(self, hf: dict[str, Any]) -> ModelConfig:
        config = super().config(hf)
        if "vision_config" not in hf:  # a language GGUF without its projector serves text
            return config
        vision = VisionConfig.from_hf(hf["vision_config"], self.generation, config.hidden_size)
        return replace(config, vision=vision, image_token_id=hf.get("image_token_id"))

    def with_projector(self, raw: RawCheckpoint, projector: Path) -> RawCheckpoint:
        return with_mmproj(raw, projector)

    def convert(self, tensors: Mapping[str, np.ndarray], config: ModelConfig) -> Iterator[tuple[str, Any]]:
        if "model.language_model.embed_tokens.weight" in tensors:
            tensors = _HubNames(tensors)
        yield from super().convert(tensors, config)
        if isinstance(config.vision, VisionConfig):
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
    generation = "qwen2_5_vl"
