"""Read an encoder GGUF file (llama.cpp's `bert` architecture, as `convert_hf_to_gguf.py` writes
BERT, all-MiniLM, bge, e5, gte and XLM-RoBERTa) into what the encoder loader reads from a
sentence-transformers directory: an HF config, HF-named float32 tensors, the tokenizer and the
pooling.

The vocabulary tells the two families apart: WordPiece ("bert") is BERT's, SentencePiece Unigram
("t5") XLM-RoBERTa's. The converter cuts RoBERTa's position table by `pad_token_id + 1` rows (its
first token's position); the reader puts zero rows back so that the family reads the table as
transformers does. The pooling is the file's `bert.pooling_type` (mean, CLS or last token; mean
when absent) and embeddings are unit length, as llama-server returns them.

A file with a classifier is a cross-encoder. XLM-RoBERTa's head survives conversion whole (`cls`,
dense and tanh on the first token; `cls.output`, the one logit), so its GGUF reranks as its
directory does. BERT's pooler, which its classifier reads, is dropped by the converter; such a
file is refused, naming the safetensors directory as the way to serve it.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer as BackendTokenizer

from engine.errors import CheckpointError
from engine.model.checkpoint.gguf_file import GGUFTensors
from engine.model.checkpoint.gguf_header import HeaderTensor, gguf_architecture, open_reader, reader_metadata
from engine.model.checkpoint.gguf_vocab import unigram_from_gguf, wordpiece_from_gguf
from engine.model.families.bert.bert import EncoderFamily
from engine.model.layers.pooling import Pooling

ARCHITECTURE = EncoderFamily.gguf_architecture
POOLING_TYPES: dict[int, Pooling] = {1: "mean", 2: "cls", 3: "last"}  # llama.cpp's enum llama_pooling_type
RANK_POOLING = 4
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
_XLM_ROBERTA_HEAD = {
    "cls.weight": "classifier.dense.weight",
    "cls.bias": "classifier.dense.bias",
    "cls.output.weight": "classifier.out_proj.weight",
    "cls.output.bias": "classifier.out_proj.bias",
}


@dataclass(frozen=True)
class GgufEncoder:
    hf_config: dict[str, Any]
    tensors: Mapping[str, np.ndarray]
    tokenizer: BackendTokenizer  # no truncation, no padding
    pooling: Pooling
    normalize: bool


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
    vocabulary = metadata.get("tokenizer.ggml.model")
    if vocabulary not in ("bert", "t5"):
        raise CheckpointError(f"{path}: GGUF tokenizer model {vocabulary!r} is not an encoder's (bert, t5)")
    xlm_roberta = vocabulary == "t5"
    names = {tensor.name for tensor in reader.tensors}
    cross_encoder = "cls.output.weight" in names
    pooling_type = int(metadata.get(f"{ARCHITECTURE}.pooling_type", RANK_POOLING if cross_encoder else 1))
    if cross_encoder or pooling_type == RANK_POOLING:
        _check_cross_encoder(path, metadata, names, xlm_roberta)
    elif pooling_type not in POOLING_TYPES:
        raise CheckpointError(f"{path}: pooling type {pooling_type} is not supported (1 mean, 2 CLS, 3 last token)")
    hf_config = _hf_config(path, metadata, xlm_roberta, cross_encoder)
    tokenizer = unigram_from_gguf(metadata) if xlm_roberta else wordpiece_from_gguf(metadata)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    tensors = _EncoderTensors(reader.tensors, hf_config, path)
    if cross_encoder:
        return GgufEncoder(hf_config, tensors, tokenizer, "cls", False)
    return GgufEncoder(hf_config, tensors, tokenizer, POOLING_TYPES[pooling_type], True)


def _check_cross_encoder(path: Path, metadata: Mapping[str, Any], names: set[str], xlm_roberta: bool) -> None:
    if not xlm_roberta:
        raise CheckpointError(
            f"{path}: a BERT GGUF cross-encoder is not supported (llama.cpp's converter drops the pooler its "
            "classifier reads); serve its safetensors directory with --rerank-model"
        )
    missing = sorted({"cls.weight", "cls.output.weight"} - names)
    if missing:
        raise CheckpointError(f"{path}: a rank-pooling GGUF lacks its classifier tensor(s) {', '.join(missing)}")
    labels = metadata.get(f"{ARCHITECTURE}.classifier.output_labels") or ["score"]
    if len(labels) != 1:
        raise CheckpointError(f"{path}: a classifier with {len(labels)} labels: a cross-encoder for rerank has one")


def _hf_config(path: Path, metadata: Mapping[str, Any], xlm_roberta: bool, cross_encoder: bool) -> dict[str, Any]:
    """The HF config the metadata implies; the loader checks every tensor's shape against it."""

    def required(key: str) -> Any:
        value = metadata.get(f"{ARCHITECTURE}.{key}")
        if value is None:
            raise CheckpointError(f"{path}: GGUF metadata lacks {ARCHITECTURE}.{key}")
        return value

    pad = int(metadata.get("tokenizer.ggml.padding_token_id", 1 if xlm_roberta else 0))
    positions = int(required("context_length"))
    model = "XLMRoberta" if xlm_roberta else "Bert"
    return {
        "architectures": [f"{model}ForSequenceClassification" if cross_encoder else f"{model}Model"],
        "model_type": "xlm-roberta" if xlm_roberta else "bert",
        "num_labels": 1,
        "vocab_size": len(metadata.get("tokenizer.ggml.tokens") or ()),
        "hidden_size": int(required("embedding_length")),
        "num_hidden_layers": int(required("block_count")),
        "num_attention_heads": int(required("attention.head_count")),
        "intermediate_size": int(required("feed_forward_length")),
        # The converter cut RoBERTa's table (and its length) by the rows before the first position.
        "max_position_embeddings": positions + (pad + 1 if xlm_roberta else 0),
        "pad_token_id": pad,
        "type_vocab_size": int(metadata.get("tokenizer.ggml.token_type_count", 2)),
        "layer_norm_eps": float(required("attention.layer_norm_epsilon")),
        "hidden_act": "gelu",
    }


class _EncoderTensors(GGUFTensors):
    """An encoder GGUF's tensors under its family's HF names."""

    def _add(self, tensor: HeaderTensor, hf_config: dict, path: Path) -> None:
        xlm_roberta = hf_config["model_type"] == "xlm-roberta"
        cross_encoder = hf_config["architectures"][0].endswith("ForSequenceClassification")
        if tensor.name in _XLM_ROBERTA_HEAD and xlm_roberta:
            self._entries[_XLM_ROBERTA_HEAD[tensor.name]] = (tensor, None, None)
            return
        prefix = "roberta." if xlm_roberta and cross_encoder else ""
        name = prefix + _hf_name(tensor.name, path)
        offset = hf_config["pad_token_id"] + 1 if xlm_roberta and tensor.name == "position_embd.weight" else 0
        self._entries[name] = (tensor, None, _skip_rows(offset) if offset else None)


def _skip_rows(count: int) -> Callable[[np.ndarray], np.ndarray]:
    """Zero rows before a position table the converter cut, which no token reads."""

    def restore(table: np.ndarray) -> np.ndarray:
        return np.concatenate([np.zeros((count, table.shape[1]), table.dtype), table])

    return restore


def _hf_name(name: str, path: Path) -> str:
    if name in _GLOBAL:
        return _GLOBAL[name]
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _BLOCK:
        return f"encoder.layer.{parts[1]}.{_BLOCK[parts[2]]}.{parts[3]}"
    raise CheckpointError(f"{path}: tensor {name} is not understood by the encoder reader")
