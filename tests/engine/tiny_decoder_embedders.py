"""Tiny random decoders served as embedding models, in sentence-transformers' layout, rebuilt bit
for bit from a fixed seed with numpy and `tokenizers` (no torch): a Qwen3 saved as the base model
(no "model." prefix, no head) with last-token pooling and normalisation, as Qwen3-Embedding ships,
and a Llama with mean pooling.

`tools/reference/tiny_encoders.py` runs them in sentence-transformers and stores the embeddings as
goldens; the tests rebuild the same directories and compare.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from tests.engine.tiny_checkpoints import SEED, TINY_MODELS, hf_tensor_shapes, random_tensor
from tests.engine.tiny_encoders import tokenizer_json, write_sentence_transformers_files

_TOKENS = {"pad_token_id": 0, "bos_token_id": None, "eos_token_id": 3}  # [PAD], [SEP] (tokenizer_json's ids)

# name → (config.json, pooling mode, normalised, saved as the base model)
TINY_DECODER_EMBEDDERS: dict[str, tuple[dict[str, Any], str, bool, bool]] = {
    "qwen3_embedding": ({**TINY_MODELS["qwen3"], "tie_word_embeddings": True, **_TOKENS}, "lasttoken", True, True),
    "llama_mean_embedding": ({**TINY_MODELS["llama_tied"], **_TOKENS}, "mean_tokens", False, False),
}


def build_tiny_decoder_embedder(name: str, directory: Path) -> Path:
    """Writes TINY_DECODER_EMBEDDERS[name] into `directory`: config, weights, tokenizer and the
    sentence-transformers files."""
    config, pooling, normalize, base_layout = TINY_DECODER_EMBEDDERS[name]
    rng = np.random.default_rng(SEED)
    tensors = {n: random_tensor(rng, n, shape) for n, shape in sorted(hf_tensor_shapes(config).items())}
    if base_layout:
        tensors = {n.removeprefix("model."): t for n, t in tensors.items()}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "tokenizer.json").write_text(tokenizer_json(decoder=True))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "[SEP]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "model_max_length": 48,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    write_sentence_transformers_files(directory, config["hidden_size"], pooling, normalize)
    return directory
