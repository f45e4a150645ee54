"""Write a Qwen2-VL or Qwen2.5-VL safetensors directory in llama.cpp's split form: a "qwen2vl"
language GGUF and its mmproj GGUF (what llama-server loads with `-m … --mmproj …`), laid out as
llama.cpp's convert_hf_to_gguf.py lays them (its names, its split of each block's qkv projection
and of the patch embedding's two frames). For tests (a tiny checkpoint as a pair) and `make bench`
(one model, both servers), where no published pair can be downloaded.

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
from gguf import GGMLQuantizationType

from engine.model.checkpoint.gguf_file import BLOCK_TENSORS
from engine.model.checkpoint.hf_folder import checkpoint_files
from engine.model.checkpoint.safetensors_dir import SafetensorsTensors
from engine.model.families.qwen2_vl.vision_tower import VisionConfig

LANGUAGE_FILE, MMPROJ_FILE = "model.gguf", "mmproj-model.gguf"

_GLOBAL = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_HF_BLOCK_PARTS = {hf: part for part, hf in BLOCK_TENSORS.items()}
_PROJECTOR_TYPES = {"qwen2_vl": "qwen2vl_merger", "qwen2_5_vl": "qwen2.5vl_merger"}
_MLP_PARTS = {
    "qwen2_vl": {"mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down"},
    "qwen2_5_vl": {"mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"},
}
_IMAGE_TOKENS = {
    "image_token_id": "<|image_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}
# llama.cpp token types
_NORMAL, _CONTROL, _USER_DEFINED, _UNUSED = 1, 3, 4, 5


def write_pair(model_dir: Path, out_dir: Path, matrix_type: str = "F32") -> tuple[Path, Path]:
    """The language GGUF and the mmproj GGUF of `model_dir`, written into `out_dir`."""
    config = json.loads((model_dir / "config.json").read_text())
    tensors = SafetensorsTensors([f for f in checkpoint_files(model_dir) if f.suffix == ".safetensors"])
    out_dir.mkdir(parents=True, exist_ok=True)
    language = _write_language(model_dir, config, tensors, out_dir / LANGUAGE_FILE, matrix_type)
    return language, _write_mmproj(model_dir, config, tensors, out_dir / MMPROJ_FILE, matrix_type == "F16")


def _write_language(
    model_dir: Path, config: dict[str, Any], tensors: SafetensorsTensors, path: Path, matrix_type: str
) -> Path:
    text = {**config, **(config.get("text_config") or {})}
    writer = gguf.GGUFWriter(path, "qwen2vl")
    writer.add_block_count(text["num_hidden_layers"])
    writer.add_context_length(text["max_position_embeddings"])
    writer.add_embedding_length(text["hidden_size"])
    writer.add_feed_forward_length(text["intermediate_size"])
    writer.add_head_count(text["num_attention_heads"])
    writer.add_head_count_kv(text["num_key_value_heads"])
    writer.add_rope_freq_base(float(text["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(text["rms_norm_eps"]))
    sections = list((text.get("rope_scaling") or text.get("rope_parameters") or {})["mrope_section"])
    writer.add_array("qwen2vl.rope.dimension_sections", sections + [0] * (4 - len(sections)))
    _add_vocabulary(writer, model_dir, text)
    for name in tensors:
        if name.startswith("visual."):
            continue
        data = np.asarray(tensors[name], dtype=np.float32)
        kind = matrix_type if data.ndim == 2 else "F32"
        writer.add_tensor(_language_name(name), _encoded(data, kind), raw_dtype=GGMLQuantizationType[kind])
    _finish(writer)
    return path


def _language_name(name: str) -> str:
    stem, _, suffix = name.rpartition(".")
    if stem in _GLOBAL:
        return f"{_GLOBAL[stem]}.{suffix}"
    _, _, layer, part = stem.split(".", 3)  # model.layers.<i>.<part>
    return f"blk.{layer}.{_HF_BLOCK_PARTS[part]}.{suffix}"


def _encoded(data: np.ndarray, kind: str) -> np.ndarray:
    if kind == "F32":
        return data
    if kind == "F16":
        return data.astype(np.float16)
    return gguf.quants.quantize(data, GGMLQuantizationType[kind])


def _add_vocabulary(writer: gguf.GGUFWriter, model_dir: Path, text: dict[str, Any]) -> None:
    """tokenizer.json's byte-level BPE as llama.cpp's converter stores it (model "gpt2",
    pre-tokenizer "qwen2"), padded with unused tokens to the model's vocabulary size. A directory
    without one (a parity test's) gets placeholders, its image tokens named at their config ids."""
    by_id: dict[int, tuple[str, int]] = {}
    merges: list[str] = []
    if (model_dir / "tokenizer.json").is_file():
        tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
        by_id = {index: (token, _NORMAL) for token, index in tokenizer["model"]["vocab"].items()}
        for added in tokenizer["added_tokens"]:
            by_id[added["id"]] = (added["content"], _CONTROL if added["special"] else _USER_DEFINED)
        merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    else:
        for key, token in _IMAGE_TOKENS.items():
            by_id[text[key]] = (token, _CONTROL)
    size = max(text["vocab_size"], max(by_id, default=-1) + 1)
    tokens = [by_id.get(i, (f"[PAD{i}]", _UNUSED)) for i in range(size)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([token for token, _ in tokens])
    writer.add_token_types([kind for _, kind in tokens])
    writer.add_token_merges(merges)
    for key, setter in (
        ("eos_token_id", writer.add_eos_token_id),
        ("bos_token_id", writer.add_bos_token_id),
        ("pad_token_id", writer.add_pad_token_id),
    ):
        if isinstance(text.get(key), int):
            setter(text[key])
    writer.add_add_bos_token(False)
    tokenizer_config = model_dir / "tokenizer_config.json"
    template = json.loads(tokenizer_config.read_text()).get("chat_template") if tokenizer_config.is_file() else None
    if isinstance(template, str):
        writer.add_chat_template(template)


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
    _finish(writer)
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


def _finish(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


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
