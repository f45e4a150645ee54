"""A Qwen2-family safetensors folder as the GGUF llama.cpp's convert_hf_to_gguf.py writes of it:
its tensor names, its metadata and its byte-level vocabulary (tokenizer model "gpt2",
pre-tokenizer "qwen2"), padded with unused tokens to the model's vocabulary size. For checkpoints
made here, whose made-in-code tokenizers the converter refuses (it knows a pre-tokenizer by the
hash of what it does to a probe text), and without the torch it imports.

    python tools/qwen2_gguf.py MODEL_DIR OUT.gguf [--type F32|F16|Q8_0]

`--type` is the matrices' (norms and biases stay F32). Qwen2 ("qwen2") and the language model of
Qwen2-VL and Qwen2.5-VL ("qwen2vl", with its M-RoPE sections; tools/vision_gguf.py writes the
mmproj) are written: their matrices go as Hugging Face stores them (llama.cpp turns their rotary
halves as Hugging Face does, so q and k need none of the row permutation Llama's get).
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

# Hugging Face model_type → GGUF general.architecture
ARCHITECTURES = {"qwen2": "qwen2", "qwen2_vl": "qwen2vl", "qwen2_5_vl": "qwen2vl"}

_GLOBAL = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_HF_BLOCK_PARTS = {hf: part for part, hf in BLOCK_TENSORS.items()}
_IMAGE_TOKENS = {
    "image_token_id": "<|image_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}
# llama.cpp token types
_NORMAL, _CONTROL, _USER_DEFINED, _UNUSED = 1, 3, 4, 5


def write_gguf(model_dir: Path, path: Path, matrix_type: str = "F32") -> Path:
    """`model_dir`'s language model as a GGUF at `path` (a vision tower's tensors left out)."""
    config = json.loads((model_dir / "config.json").read_text())
    text = {**config, **(config.get("text_config") or {})}
    if config["model_type"] not in ARCHITECTURES:
        raise ValueError(
            f"{model_dir} is a {config['model_type']} checkpoint; written here: {', '.join(ARCHITECTURES)}"
        )
    architecture = ARCHITECTURES[config["model_type"]]
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_block_count(text["num_hidden_layers"])
    writer.add_context_length(text["max_position_embeddings"])
    writer.add_embedding_length(text["hidden_size"])
    writer.add_feed_forward_length(text["intermediate_size"])
    writer.add_head_count(text["num_attention_heads"])
    writer.add_head_count_kv(text["num_key_value_heads"])
    writer.add_rope_freq_base(float(text["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(text["rms_norm_eps"]))
    if architecture == "qwen2vl":
        sections = list((text.get("rope_scaling") or text.get("rope_parameters") or {})["mrope_section"])
        writer.add_array("qwen2vl.rope.dimension_sections", sections + [0] * (4 - len(sections)))
    _add_vocabulary(writer, model_dir, text)
    tensors = SafetensorsTensors([f for f in checkpoint_files(model_dir) if f.suffix == ".safetensors"])
    for name in tensors:
        if name.startswith("visual."):
            continue
        data = np.asarray(tensors[name], dtype=np.float32)
        kind = matrix_type if data.ndim == 2 else "F32"
        writer.add_tensor(_gguf_name(name), _encoded(data, kind), raw_dtype=GGMLQuantizationType[kind])
    write_out(writer)
    return path


def write_out(writer: gguf.GGUFWriter) -> None:
    """Writes what `writer` holds to its file and closes it."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _gguf_name(name: str) -> str:
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
    """tokenizer.json's byte-level BPE as llama.cpp's converter stores it. A directory without one
    (a parity test's) gets placeholders, Qwen2-VL's image tokens named at their config ids."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--type", default="F32", choices=("F32", "F16", "Q8_0"))
    args = parser.parse_args()
    print(write_gguf(args.model_dir, args.out, args.type))


if __name__ == "__main__":
    main()
