"""A tiny BERT's sentence-transformers directory written as a GGUF file the way llama.cpp's
`convert_hf_to_gguf.py` writes one: tensor names from gguf-py's BERT map, the vocabulary in
"phantom space" (a word-initial piece gains U+2581, a continuation loses its `##`, control tokens
stay), the token-type count, the pooling type from `1_Pooling/config.json`, and the special token
ids gguf-py's `SpecialVocab` has keys for (not [CLS], which it skips)."""

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

CONTROL, NORMAL, UNUSED = int(gguf.TokenType.CONTROL), int(gguf.TokenType.NORMAL), int(gguf.TokenType.UNUSED)
POOLING = {"mean_tokens": gguf.PoolingType.MEAN, "cls_token": gguf.PoolingType.CLS}


def write_bert_gguf(directory: Path, out: Path, half: bool = False) -> Path:
    """`directory` (a tiny BERT from tests.engine.tiny_encoders) as GGUF `out`; with `half`, the
    matrices in float16 as `--outtype f16` stores them (norms and biases stay float32)."""
    config = json.loads((directory / "config.json").read_text())
    vocab = json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]
    by_id = {i: token for token, i in vocab.items()}
    # Ids the vocabulary skips (the tiny one spells "a" twice) get placeholders, as the converter's.
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(config["vocab_size"])]
    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    types = [CONTROL if t in special else NORMAL if i in by_id else UNUSED for i, t in enumerate(tokens)]
    phantom = [t if t in special else t[2:] if t.startswith("##") else "\u2581" + t for t in tokens]
    pooling = json.loads((directory / "1_Pooling" / "config.json").read_text())
    mode = next(name for name in POOLING if pooling[f"pooling_mode_{name}"])

    writer = gguf.GGUFWriter(out, "bert")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(POOLING[mode])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if half else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(phantom)
    writer.add_token_types(types)
    writer.add_token_type_count(config["type_vocab_size"])
    writer.add_unk_token_id(vocab["[UNK]"])
    writer.add_sep_token_id(vocab["[SEP]"])
    writer.add_pad_token_id(vocab["[PAD]"])
    writer.add_mask_token_id(vocab["[MASK]"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, config["num_hidden_layers"])
    for name, tensor in sorted(load_file(str(directory / "model.safetensors")).items()):
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, name
        writer.add_tensor(gguf_name, tensor.astype(np.float16) if half and tensor.ndim == 2 else tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
