"""Write a Qwen2-VL or Qwen2.5-VL safetensors directory in llama.cpp's split form: a "qwen2vl"
language GGUF (tools/qwen2_gguf.py) and its mmproj GGUF (what llama-server loads with
`-m … --mmproj …`), laid out as llama.cpp's convert_hf_to_gguf.py lays them (its names, its split
of each block's qkv projection and of the patch embedding's two frames). For tests (a tiny
checkpoint as a pair) and `make bench` (one model, both servers), where no published pair can be
downloaded.

    python tools/vision_gguf.py MODEL_DIR OUT_DIR [--type F32|F16|Q8_0]

writes OUT_DIR/model.gguf and OUT_DIR/mmproj-model.gguf. `--type` is the language model's
matrices' (norms and biases stay F32); the projector is F32 but for its patch embedding, F16
with `--type F16`, as the converter writes them.
"""

import argparse
import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from engine.model.checkpoint.hf_folder import checkpoint_files
from engine.model.checkpoint.safetensors_dir import SafetensorsTensors
from engine.model.families.qwen2_vl.vision_tower import VisionConfig
from tools.qwen2_gguf import write_gguf, write_out

LANGUAGE_FILE, MMPROJ_FILE = "model.gguf", "mmproj-model.gguf"

_PROJECTOR_TYPES = {"qwen2_vl": "qwen2vl_merger", "qwen2_5_vl": "qwen2.5vl_merger"}
_MLP_PARTS = {
    "qwen2_vl": {"mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down"},
    "qwen2_5_vl": {"mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"},
}


def write_pair(model_dir: Path, out_dir: Path, matrix_type: str = "F32") -> tuple[Path, Path]:
    """The language GGUF and the mmproj GGUF of `model_dir`, written into `out_dir`."""
    config = json.loads((model_dir / "config.json").read_text())
    tensors = SafetensorsTensors([f for f in checkpoint_files(model_dir) if f.suffix == ".safetensors"])
    out_dir.mkdir(parents=True, exist_ok=True)
    language = write_gguf(model_dir, out_dir / LANGUAGE_FILE, matrix_type)
    return language, _write_mmproj(model_dir, config, tensors, out_dir / MMPROJ_FILE, matrix_type == "F16")


def _write_mmproj(
    model_dir: Path, config: dict[str, Any], tensors: SafetensorsTensors, path: Path, half_patches: bool
) -> Path:
    generation = config["model_type"]
    text = {**config, **(config.get("text_config") or {})}
    vision = VisionConfig.from_hf(config["vision_config"], generation, text["hidden_size"])
    processor_file = model_dir / "preprocessor_config.json"
    processor = json.loads(processor_file.read_text()) if processor_file.is_file() else {}
    writer = gguf.GGUFWriter(path, "clip")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", _PROJECTOR_TYPES[generation])
    writer.add_uint32("clip.vision.image_size", 560)
    writer.add_uint32("clip.vision.patch_size", vision.patch_size)
    writer.add_uint32("clip.vision.embedding_length", vision.width)
    writer.add_uint32("clip.vision.feed_forward_length", vision.mlp_size)
    writer.add_uint32("clip.vision.block_count", vision.depth)
    writer.add_uint32("clip.vision.attention.head_count", vision.heads)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_uint32("clip.vision.projection_dim", vision.out_size)
    writer.add_uint32("clip.vision.spatial_merge_size", vision.merge_size)
    mean = processor.get("image_mean", [0.48145466, 0.4578275, 0.40821073])
    std = processor.get("image_std", [0.26862954, 0.26130258, 0.27577711])
    writer.add_array("clip.vision.image_mean", [float(x) for x in mean])
    writer.add_array("clip.vision.image_std", [float(x) for x in std])
    for key, name in (("min_pixels", "image_min_pixels"), ("max_pixels", "image_max_pixels")):
        if key in processor:
            writer.add_uint32(f"clip.vision.{name}", int(processor[key]))
    if generation == "qwen2_5_vl":
        writer.add_bool("clip.use_silu", True)
        full = vision.full_attention_blocks
        writer.add_uint32("clip.vision.n_wa_pattern", full[0] + 1 if full else 0)
        writer.add_uint32("clip.vision.window_size", vision.window_size)
    else:
        writer.add_bool("clip.use_gelu", True)
    for name, data in _mmproj_tensors(tensors, generation):
        half = half_patches and name.startswith("v.patch_embd")
        writer.add_tensor(name, data.astype(np.float16 if half else np.float32))
    write_out(writer)
    return path


def _mmproj_tensors(tensors: SafetensorsTensors, generation: str) -> list[tuple[str, np.ndarray]]:
    parts = {"norm1": "ln1", "norm2": "ln2", "attn.proj": "attn_out"} | _MLP_PARTS[generation]
    out: list[tuple[str, np.ndarray]] = []
    for name in tensors:
        if not name.startswith("visual."):
            continue
        data = np.asarray(tensors[name], dtype=np.float32)
        stem, _, suffix = name.removeprefix("visual.").rpartition(".")
        if stem == "patch_embed.proj":  # [out, in, frames, patch, patch] → a 2D kernel a frame
            out += [("v.patch_embd.weight", data[:, :, 0]), ("v.patch_embd.weight.1", data[:, :, 1])]
        elif stem == "merger.ln_q":
            out.append((f"v.post_ln.{suffix}", data))
        elif stem.startswith("merger.mlp."):
            out.append((f"mm.{stem.rsplit('.', 1)[1]}.{suffix}", data))
        else:
            _, layer, part = stem.split(".", 2)  # blocks.<i>.<part>
            if part == "attn.qkv":
                for piece, chunk in zip(("attn_q", "attn_k", "attn_v"), np.split(data, 3), strict=True):
                    out.append((f"v.blk.{layer}.{piece}.{suffix}", chunk))
            else:
                out.append((f"v.blk.{layer}.{parts[part]}.{suffix}", data))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--type", default="F32", choices=("F32", "F16", "Q8_0"))
    args = parser.parse_args()
    language, mmproj = write_pair(args.model_dir, args.out_dir, args.type)
    print(language)
    print(mmproj)


if __name__ == "__main__":
    main()
