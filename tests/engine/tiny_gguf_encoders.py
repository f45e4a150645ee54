"""A tiny encoder's sentence-transformers directory written as a GGUF file the way llama.cpp's
`convert_hf_to_gguf.py` writes one: tensor names from gguf-py's BERT map (RoBERTa's `roberta.`
prefix dropped, its position table cut by `pad_token_id + 1` rows, a classifier as `cls` and
`cls.output`, BERT's pooler dropped), the pooling type from `1_Pooling/config.json`, and the
special token ids gguf-py's `SpecialVocab` has keys for.

BERT's vocabulary goes in "phantom space" (a word-initial piece gains U+2581, a continuation loses
its `##`, control tokens stay) with the token-type count; XLM-RoBERTa's as a Unigram ("t5") with
its scores, token types and precompiled normalisation map."""

import base64
import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from safetensors.numpy import load_file

CONTROL, NORMAL, UNKNOWN, UNUSED = (
    int(gguf.TokenType.CONTROL),
    int(gguf.TokenType.NORMAL),
    int(gguf.TokenType.UNKNOWN),
    int(gguf.TokenType.UNUSED),
)
POOLING = {"mean_tokens": gguf.PoolingType.MEAN, "cls_token": gguf.PoolingType.CLS}


def write_encoder_gguf(directory: Path, out: Path, half: bool = False) -> Path:
    """`directory` (a tiny encoder from tests.engine.tiny_encoders) as GGUF `out`; with `half`, the
    matrices in float16 as `--outtype f16` stores them (norms and biases stay float32)."""
    config = json.loads((directory / "config.json").read_text())
    xlm_roberta = config["model_type"] == "xlm-roberta"
    offset = config["pad_token_id"] + 1 if xlm_roberta else 0
    writer = gguf.GGUFWriter(out, "bert")
    writer.add_context_length(config["max_position_embeddings"] - offset)
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    if (directory / "1_Pooling").is_dir():
        pooling = json.loads((directory / "1_Pooling" / "config.json").read_text())
        writer.add_pooling_type(POOLING[next(name for name in POOLING if pooling[f"pooling_mode_{name}"])])
    else:
        writer.add_classifier_output_labels(["LABEL_0"])  # transformers' name for a one-label head
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if half else gguf.LlamaFileType.ALL_F32)
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    (_add_unigram_vocabulary if xlm_roberta else _add_wordpiece_vocabulary)(writer, tokenizer, config)
    writer.add_token_type_count(config["type_vocab_size"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, config["num_hidden_layers"])
    for name, tensor in sorted(load_file(str(directory / "model.safetensors")).items()):
        name = name.removeprefix("roberta.").removeprefix("bert.")
        if name.startswith("pooler."):
            continue
        if name.startswith("classifier.") and not xlm_roberta:
            name = name.replace("classifier.", "classifier.out_proj.")
        if name == "embeddings.position_embeddings.weight":
            tensor = tensor[offset:]
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, name
        writer.add_tensor(gguf_name, tensor.astype(np.float16) if half and tensor.ndim == 2 else tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _add_wordpiece_vocabulary(writer: gguf.GGUFWriter, tokenizer: dict[str, Any], config: dict[str, Any]) -> None:
    vocab = tokenizer["model"]["vocab"]
    by_id = {i: token for token, i in vocab.items()}
    # Ids the vocabulary skips (the tiny one spells "a" twice) get placeholders, as the converter's.
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(config["vocab_size"])]
    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    types = [CONTROL if t in special else NORMAL if i in by_id else UNUSED for i, t in enumerate(tokens)]
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([t if t in special else t[2:] if t.startswith("##") else "\u2581" + t for t in tokens])
    writer.add_token_types(types)
    writer.add_unk_token_id(vocab["[UNK]"])
    writer.add_sep_token_id(vocab["[SEP]"])
    writer.add_pad_token_id(vocab["[PAD]"])
    writer.add_mask_token_id(vocab["[MASK]"])


def _add_unigram_vocabulary(writer: gguf.GGUFWriter, tokenizer: dict[str, Any], config: dict[str, Any]) -> None:
    pieces = tokenizer["model"]["vocab"]
    ids = {piece: i for i, (piece, _) in enumerate(pieces)}
    specials = {token["content"] for token in tokenizer["added_tokens"] if token["special"]}
    unk = tokenizer["model"]["unk_id"]
    writer.add_tokenizer_model("t5")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([piece for piece, _ in pieces])
    writer.add_token_scores([score for _, score in pieces])
    writer.add_token_types(
        [UNKNOWN if i == unk else CONTROL if piece in specials else NORMAL for i, (piece, _) in enumerate(pieces)]
    )
    writer.add_add_space_prefix(True)
    writer.add_remove_extra_whitespaces(True)
    writer.add_precompiled_charsmap(base64.b64decode(tokenizer["normalizer"]["normalizers"][0]["precompiled_charsmap"]))
    writer.add_bos_token_id(ids["<s>"])
    writer.add_eos_token_id(ids["</s>"])
    writer.add_unk_token_id(unk)
    writer.add_sep_token_id(ids["</s>"])
    writer.add_pad_token_id(ids["<pad>"])
    writer.add_mask_token_id(ids["<mask>"])
