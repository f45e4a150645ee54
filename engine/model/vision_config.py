"""A vision tower's hyper-parameters, read from a Hugging Face `vision_config` dict."""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VisionConfig:
    """A vision tower's hyper-parameters (HF `vision_config`), for either generation."""

    generation: str  # "qwen2_vl" or "qwen2_5_vl"
    depth: int
    width: int  # the tower's hidden size
    heads: int
    mlp_size: int
    out_size: int  # the decoder's hidden size
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    in_channels: int = 3
    window_size: int = 112  # pixels (Qwen2.5-VL)
    full_attention_blocks: tuple[int, ...] = ()  # Qwen2.5-VL; every block in Qwen2-VL
    rope_theta: float = 10000.0

    @classmethod
    def from_hf(cls, d: dict[str, Any], generation: str, decoder_width: int) -> "VisionConfig":
        common: dict[str, Any] = {
            "generation": generation,
            "depth": int(d["depth"]),
            "heads": int(d["num_heads"]),
            "patch_size": int(d.get("patch_size", 14)),
            "temporal_patch_size": int(d.get("temporal_patch_size", 2)),
            "merge_size": int(d.get("spatial_merge_size", 2)),
            "in_channels": int(d.get("in_channels", d.get("in_chans", 3))),
            "rope_theta": float((d.get("rope_parameters") or {}).get("rope_theta", 10000.0)),
        }
        if generation == "qwen2_vl":
            width = int(d["embed_dim"])
            return cls(
                **common,
                width=width,
                mlp_size=int(width * float(d.get("mlp_ratio", 4))),
                out_size=int(d.get("hidden_size", decoder_width)),
                full_attention_blocks=tuple(range(int(d["depth"]))),
            )
        return cls(
            **common,
            width=int(d["hidden_size"]),
            mlp_size=int(d["intermediate_size"]),
            out_size=int(d.get("out_hidden_size", decoder_width)),
            window_size=int(d.get("window_size", 112)),
            full_attention_blocks=tuple(int(i) for i in d.get("fullatt_block_indexes", ())),
        )

    @property
    def patch_inputs(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def merge_unit(self) -> int:
        return self.merge_size**2

    @property
    def window_patches(self) -> int:
        """The most patches a window holds (Qwen2.5-VL's windowed blocks)."""
        return (self.window_size // self.patch_size) ** 2
