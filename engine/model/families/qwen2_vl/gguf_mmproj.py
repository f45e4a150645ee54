"""Read llama.cpp's `mmproj` GGUF, the vision encoder and projector that llama-server loads beside a
language GGUF with `--mmproj`, into what a safetensors vision-language checkpoint holds: the HF
`vision_config`, the image processor's settings and the `visual.*` tensors under HF names.

Projectors served: Qwen2-VL's and Qwen2.5-VL's merger ("qwen2vl_merger", "qwen2.5vl_merger"), the
towers of vision_tower.py; their language GGUF is llama.cpp's "qwen2vl" architecture, and
`with_mmproj` joins the pair into one vision-language checkpoint. llama.cpp's converter splits two
tensors HF keeps whole, and they are joined back here: each block's fused qkv projection (written
as q, k and v) and the patch embedding's 3D convolution (one 2D kernel per frame:
`v.patch_embd.weight` and `v.patch_embd.weight.1`).
"""

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from gguf.quants import dequantize

from engine.errors import CheckpointError
from engine.model.checkpoint.gguf_file import GGUFTensors, check_tensor_type
from engine.model.checkpoint.gguf_header import GGUFHeader, HeaderTensor, open_reader
from engine.model.checkpoint.raw import RawCheckpoint
from engine.model.families.qwen2_vl.projector_files import LANGUAGE_ARCHITECTURE

# clip.projector_type → (the HF architecture of the whole model, the tower's generation)
PROJECTORS = {
    "qwen2vl_merger": ("Qwen2VLForConditionalGeneration", "qwen2_vl"),
    "qwen2.5vl_merger": ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl"),
}
# The token whose embedding an image's fill, looked up in a language GGUF's vocabulary.
IMAGE_TOKEN = "<|image_pad|>"

# llama.cpp's limits for these projectors when the file sets none (clip.cpp: 8 to 4096 image
# tokens an image), in pixels: a token is a 2 × 2 block of 14-pixel patches.
_TOKEN_PIXELS = (14 * 2) ** 2
_MIN_PIXELS, _MAX_PIXELS = 8 * _TOKEN_PIXELS, 4096 * _TOKEN_PIXELS
_WINDOW_PIXELS = 112  # Qwen2.5-VL's attention windows where the file gives no clip.vision.window_size

_BLOCK = re.compile(r"v\.blk\.(?P<layer>\d+)\.(?P<part>\w+)\.(?P<suffix>weight|bias)")
_BLOCK_PARTS = {"ln1": "norm1", "ln2": "norm2", "attn_out": "attn.proj", "ffn_gate": "mlp.gate_proj"}
# The MLP's two matrices are fc1/fc2 in Qwen2-VL and up_proj/down_proj in Qwen2.5-VL.
_MLP_PARTS = {
    "qwen2_vl": {"ffn_up": "mlp.fc1", "ffn_down": "mlp.fc2"},
    "qwen2_5_vl": {"ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"},
}
_GLOBAL = {
    "v.post_ln.weight": "visual.merger.ln_q.weight",
    "v.post_ln.bias": "visual.merger.ln_q.bias",
    "mm.0.weight": "visual.merger.mlp.0.weight",
    "mm.0.bias": "visual.merger.mlp.0.bias",
    "mm.2.weight": "visual.merger.mlp.2.weight",
    "mm.2.bias": "visual.merger.mlp.2.bias",
}
_PATCH_FRAMES = ("v.patch_embd.weight", "v.patch_embd.weight.1")


@dataclass(frozen=True)
class Mmproj:
    """A projector file read as the vision half of an HF checkpoint."""

    architecture: str  # HF `architectures[0]` of the model the pair makes
    vision_config: dict[str, Any]  # HF `vision_config`
    image_processor: dict[str, Any]  # preprocessor_config.json's fields
    tensors: Mapping[str, np.ndarray]  # `visual.*`, HF names and layouts


def with_mmproj(raw: RawCheckpoint, path: Path) -> RawCheckpoint:
    """`raw`, a "qwen2vl" language GGUF, and the mmproj GGUF at `path` read as one vision-language
    checkpoint."""
    metadata = raw.gguf_metadata or {}
    if metadata.get("general.architecture") != LANGUAGE_ARCHITECTURE:
        raise CheckpointError(
            f"{path} is a projector for a {LANGUAGE_ARCHITECTURE} language model; "
            f"{raw.source} is {metadata.get('general.architecture')}"
        )
    header = open_reader(path)
    for tensor in header.tensors:
        check_tensor_type(tensor, path)
    projector = read_mmproj(header, path, raw.hf_config["hidden_size"])
    tokens = metadata.get("tokenizer.ggml.tokens", [])
    if IMAGE_TOKEN not in tokens:
        raise CheckpointError(f"{raw.source}: its vocabulary has no {IMAGE_TOKEN} token for images")
    hf_config = raw.hf_config | {
        "architectures": [projector.architecture],
        "vision_config": projector.vision_config,
        "image_token_id": tokens.index(IMAGE_TOKEN),
    }
    assert isinstance(raw.tensors, GGUFTensors)
    tensors = raw.tensors.joined(projector.tensors)
    return replace(raw, hf_config=hf_config, tensors=tensors, image_processor=projector.image_processor)


def read_mmproj(header: GGUFHeader, path: Path, decoder_width: int) -> Mmproj:
    """The mmproj GGUF at `path` (its `header` read, its tensor types checked), for a decoder
    `decoder_width` wide; CheckpointError if it is not one of the projectors served or does not fit
    that decoder."""
    metadata = header.fields
    if metadata.get("general.architecture") != "clip" or not metadata.get("clip.has_vision_encoder"):
        raise CheckpointError(f"{path}: not an mmproj GGUF with a vision encoder (llama.cpp's clip architecture)")
    projector = metadata.get("clip.vision.projector_type", metadata.get("clip.projector_type"))
    if projector not in PROJECTORS:
        served = ", ".join(PROJECTORS)
        raise CheckpointError(f"{path}: projector type {projector!r} is not served (served: {served})")
    architecture, generation = PROJECTORS[projector]
    tensors = {tensor.name: tensor for tensor in header.tensors}
    vision = _vision_config(metadata, tensors, generation, path)
    if vision["out_size"] != decoder_width:
        raise CheckpointError(
            f"{path}: the projector gives embeddings {vision['out_size']} wide; the language model is {decoder_width}"
        )
    return Mmproj(
        architecture=architecture,
        vision_config=vision["hf"],
        image_processor=_image_processor(metadata, path),
        tensors=MmprojTensors(tensors, generation, path),
    )


def _vision_config(
    metadata: Mapping[str, Any], tensors: Mapping[str, HeaderTensor], generation: str, path: Path
) -> dict[str, Any]:
    def key(name: str) -> Any:
        if f"clip.vision.{name}" not in metadata:
            raise CheckpointError(f"{path}: mmproj metadata lacks clip.vision.{name}")
        return metadata[f"clip.vision.{name}"]

    depth, width, heads = int(key("block_count")), int(key("embedding_length")), int(key("attention.head_count"))
    if "v.blk.0.ffn_up.weight" not in tensors:
        raise CheckpointError(f"{path}: mmproj lacks tensor v.blk.0.ffn_up.weight")
    # From the tensor: llama.cpp's converter writes Qwen2-VL's merger width as its feed_forward_length.
    mlp = int(tensors["v.blk.0.ffn_up.weight"].shape[1])
    common = {
        "model_type": generation,
        "depth": depth,
        "num_heads": heads,
        "patch_size": int(key("patch_size")),
        "spatial_merge_size": int(metadata.get("clip.vision.spatial_merge_size", 2)),
        "temporal_patch_size": len(_PATCH_FRAMES),
        "in_channels": 3,
    }
    out = int(key("projection_dim"))
    if generation == "qwen2_vl":
        if mlp % width:
            raise CheckpointError(f"{path}: an MLP {mlp} wide is not a whole multiple of the tower's {width}")
        hf = {**common, "embed_dim": width, "hidden_size": out, "mlp_ratio": mlp // width}
    else:
        pattern = int(key("n_wa_pattern"))
        hf = {
            **common,
            "hidden_size": width,
            "intermediate_size": mlp,
            "out_hidden_size": out,
            "window_size": int(metadata.get("clip.vision.window_size", _WINDOW_PIXELS)),
            "fullatt_block_indexes": [i for i in range(depth) if pattern and (i + 1) % pattern == 0],
        }
    return {"hf": hf, "out_size": out}


def _image_processor(metadata: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The preprocessing llama-server applies for these projectors: the file's mean, std and patch
    size, bicubic resizing, its pixel limits or else clip.cpp's."""
    for name in ("image_mean", "image_std", "patch_size"):
        if f"clip.vision.{name}" not in metadata:
            raise CheckpointError(f"{path}: mmproj metadata lacks clip.vision.{name}")
    return {
        "image_mean": [float(x) for x in metadata["clip.vision.image_mean"]],
        "image_std": [float(x) for x in metadata["clip.vision.image_std"]],
        "patch_size": int(metadata["clip.vision.patch_size"]),
        "merge_size": int(metadata.get("clip.vision.spatial_merge_size", 2)),
        "temporal_patch_size": len(_PATCH_FRAMES),
        "min_pixels": int(metadata.get("clip.vision.image_min_pixels", _MIN_PIXELS)),
        "max_pixels": int(metadata.get("clip.vision.image_max_pixels", _MAX_PIXELS)),
    }


class MmprojTensors(Mapping[str, np.ndarray]):
    """An mmproj file's tensors as HF's `visual.*` tensors, dequantized to float32 on each lookup."""

    def __init__(self, tensors: Mapping[str, HeaderTensor], generation: str, path: Path) -> None:
        self._tensors = tensors
        self._entries: dict[str, Callable[[], np.ndarray]] = {}
        parts = _BLOCK_PARTS | _MLP_PARTS[generation]
        if any(name in tensors for name in _PATCH_FRAMES) and not all(name in tensors for name in _PATCH_FRAMES):
            raise CheckpointError(f"{path}: mmproj holds one frame of the patch embedding; it needs {_PATCH_FRAMES}")
        for name in tensors:
            if name in _PATCH_FRAMES:
                self._entries["visual.patch_embed.proj.weight"] = self._patch_embedding
            elif name in _GLOBAL:
                self._entries[_GLOBAL[name]] = self._read(name)
            elif (match := _BLOCK.fullmatch(name)) and match["part"] in ("attn_q", "attn_k", "attn_v"):
                qkv = f"visual.blocks.{match['layer']}.attn.qkv.{match['suffix']}"
                self._entries[qkv] = self._qkv(match["layer"], match["suffix"], path)
            elif match and match["part"] in parts:
                hf = f"visual.blocks.{match['layer']}.{parts[match['part']]}.{match['suffix']}"
                self._entries[hf] = self._read(name)
            else:
                raise CheckpointError(f"{path}: tensor {name} is not understood by this reader")

    def _value(self, name: str) -> np.ndarray:
        tensor = self._tensors[name]
        return np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)

    def _read(self, name: str) -> Callable[[], np.ndarray]:
        return lambda: self._value(name)

    def _qkv(self, layer: str, suffix: str, path: Path) -> Callable[[], np.ndarray]:
        names = [f"v.blk.{layer}.{part}.{suffix}" for part in ("attn_q", "attn_k", "attn_v")]
        if missing := [name for name in names if name not in self._tensors]:
            raise CheckpointError(f"{path}: mmproj lacks tensor {missing[0]}")
        return lambda: np.concatenate([self._value(name) for name in names])

    def _patch_embedding(self) -> np.ndarray:
        """[out, in, frames, patch, patch], HF's Conv3d kernel, from one [out, in, patch, patch] a frame."""
        return np.stack([self._value(name) for name in _PATCH_FRAMES], axis=2)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._entries[name]()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
