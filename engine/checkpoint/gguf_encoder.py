"""Read a BERT GGUF file (llama.cpp's `bert` architecture: all-MiniLM, bge, e5, gte converted by
`convert_hf_to_gguf.py`) into what the encoder loader reads from a sentence-transformers
directory: an HF config, HF-named float32 tensors, the tokenizer and the pooling.

The pooling is the file's `bert.pooling_type` (mean, CLS or last token; mean when absent) and the
embeddings are unit length, as llama-server returns them. A file whose pooling is "rank" or that
carries a classifier (`cls`, `cls.output`) is a cross-encoder, which llama.cpp's converter stores
without BERT's pooler; it is refused, naming the safetensors directory as the way to serve it.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import ReaderTensor
from tokenizers import Tokenizer as BackendTokenizer

from engine.checkpoint.gguf_file import GGUFTensors, gguf_architecture, open_reader, reader_metadata
from engine.errors import CheckpointError
from engine.layers.encoder import Pooling
from engine.tokenizer.gguf_vocab import wordpiece_from_gguf

ARCHITECTURE = "bert"
POOLING_TYPES: dict[int, Pooling] = {1: "mean", 2: "cls", 3: "last"}  # llama.cpp's enum llama_pooling_type
_GLOBAL = {
    "token_embd.weight": "embeddings.word_embeddings.weight",
    "position_embd.weight": "embeddings.position_embeddings.weight",
    "token_types.weight": "embeddings.token_type_embeddings.weight",
    "token_embd_norm.weight": "embeddings.LayerNorm.weight",
    "token_embd_norm.bias": "embeddings.LayerNorm.bias",
}
_BLOCK = {
    "attn_q": "attention.self.query",
    "attn_k": "attention.self.key",
    "attn_v": "attention.self.value",
    "attn_output": "attention.output.dense",
    "attn_output_norm": "attention.output.LayerNorm",
    "ffn_up": "intermediate.dense",
    "ffn_down": "output.dense",
    "layer_output_norm": "output.LayerNorm",
}


@dataclass(frozen=True)
class GgufEncoder:
    hf_config: dict[str, Any]
    tensors: Mapping[str, np.ndarray]
    tokenizer: BackendTokenizer  # no truncation, no padding
    pooling: Pooling


def is_gguf_encoder(path: Path) -> bool:
    """Whether `path` is a GGUF file of an encoder architecture."""
    return path.suffix == ".gguf" and path.is_file() and gguf_architecture(path) == ARCHITECTURE


def read_gguf_encoder(path: Path) -> GgufEncoder:
    reader = open_reader(path)
    metadata = reader_metadata(reader, path)
    if metadata.get("general.architecture") != ARCHITECTURE:
        raise CheckpointError(
            f"{path}: GGUF architecture {metadata.get('general.architecture')!r} is not an encoder (bert)"
        )
    pooling_type = int(metadata.get(f"{ARCHITECTURE}.pooling_type", 1))
    if pooling_type == 4 or any(tensor.name == "cls.output.weight" for tensor in reader.tensors):
        raise CheckpointError(
            f"{path}: a GGUF cross-encoder is not supported (llama.cpp's converter drops BERT's pooler); "
            "serve its safetensors directory with --rerank-model"
        )
    if pooling_type not in POOLING_TYPES:
        raise CheckpointError(f"{path}: pooling type {pooling_type} is not supported (1 mean, 2 CLS, 3 last token)")

    def required(key: str) -> Any:
        value = metadata.get(f"{ARCHITECTURE}.{key}")
        if value is None:
            raise CheckpointError(f"{path}: GGUF metadata lacks {ARCHITECTURE}.{key}")
        return value

    # Shapes the metadata implies; the loader checks every tensor against them.
    hf_config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": len(metadata.get("tokenizer.ggml.tokens") or ()),
        "hidden_size": int(required("embedding_length")),
        "num_hidden_layers": int(required("block_count")),
        "num_attention_heads": int(required("attention.head_count")),
        "intermediate_size": int(required("feed_forward_length")),
        "max_position_embeddings": int(required("context_length")),
        "type_vocab_size": int(metadata.get("tokenizer.ggml.token_type_count", 2)),
        "layer_norm_eps": float(required("attention.layer_norm_epsilon")),
        "hidden_act": "gelu",
    }
    tokenizer = wordpiece_from_gguf(metadata)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return GgufEncoder(
        hf_config, _EncoderTensors(reader.tensors, hf_config, path), tokenizer, POOLING_TYPES[pooling_type]
    )


class _EncoderTensors(GGUFTensors):
    """A BERT GGUF's tensors under BERT's HF names."""

    def _add(self, tensor: ReaderTensor, hf_config: dict, path: Path) -> None:
        self._entries[_hf_name(tensor.name, path)] = (tensor, None, None)


def _hf_name(name: str, path: Path) -> str:
    if name in _GLOBAL:
        return _GLOBAL[name]
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _BLOCK:
        return f"encoder.layer.{parts[1]}.{_BLOCK[parts[2]]}.{parts[3]}"
    raise CheckpointError(f"{path}: tensor {name} is not understood by the encoder reader")
