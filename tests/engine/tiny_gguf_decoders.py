"""Tiny llama GGUF files whose matrices are in chosen block formats, for the block-serving tests.

Hidden 256 and FFN 512, so that every matrix is whole blocks of every format (K formats: 256
inputs a block). Random weights; no vocabulary for engine tests that run the model on token ids,
or another GGUF's tokenizer (`tokenizer_from`) for a file `pooled serve` can serve.
"""

from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType

from tests.engine.gguf_blocks import quantize

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, VOCAB = 256, 512, 2, 4, 2, 320

# A Q4_K_M file's mixture, as llama-quantize makes it: Q4_K, with v and down in Q6_K in half the
# layers and the output head in Q6_K.
Q4_K_M = {"default": "Q4_K", "attn_v.0": "Q6_K", "ffn_down.0": "Q6_K", "output": "Q6_K"}

# Every served format at least once: one per matrix part, the embedding and the head their own.
EVERY_FORMAT = {
    "default": "Q5_K",
    "attn_q": "Q4_0",
    "attn_k": "Q4_1",
    "attn_v": "Q5_0",
    "attn_output": "Q5_1",
    "ffn_gate": "Q4_K",
    "ffn_up": "Q6_K",
    "ffn_down.1": "Q8_0",
    "token_embd": "Q8_0",
    "output": "Q6_K",
}


def matrix_shapes(tied: bool, vocab: int = VOCAB) -> dict[str, tuple[int, int]]:
    """GGUF matrix name → [N, K] (rows, inputs)."""
    head_dim = HIDDEN // HEADS
    shapes = {"token_embd": (vocab, HIDDEN)} | ({} if tied else {"output": (vocab, HIDDEN)})
    for layer in range(LAYERS):
        shapes |= {
            f"blk.{layer}.attn_q": (HEADS * head_dim, HIDDEN),
            f"blk.{layer}.attn_k": (KV_HEADS * head_dim, HIDDEN),
            f"blk.{layer}.attn_v": (KV_HEADS * head_dim, HIDDEN),
            f"blk.{layer}.attn_output": (HIDDEN, HEADS * head_dim),
            f"blk.{layer}.ffn_gate": (FFN, HIDDEN),
            f"blk.{layer}.ffn_up": (FFN, HIDDEN),
            f"blk.{layer}.ffn_down": (HIDDEN, FFN),
        }
    return shapes


def format_of(name: str, formats: dict[str, str]) -> str:
    """A matrix's format: `formats` keyed by part and layer ("attn_v.0"), by part, or "default"."""
    parts = name.split(".")
    part = parts[-1] if len(parts) == 1 else parts[2]
    keys = [f"{part}.{parts[1]}"] if len(parts) > 1 else []
    return next((formats[key] for key in [*keys, part] if key in formats), formats["default"])


def write_tiny_gguf(
    path: Path, formats: dict[str, str], tied: bool = False, seed: int = 0, tokenizer_from: Path | None = None
) -> Path:
    """A tiny llama GGUF at `path`, each matrix in `format_of(name, formats)` ("F32" allowed); with
    `tokenizer_from`, that GGUF's tokenizer and chat template, the vocabulary sized to it."""
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, "llama")
    vocab = _copy_tokenizer(gguf.GGUFReader(tokenizer_from), writer) if tokenizer_from else VOCAB
    writer.add_block_count(LAYERS)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_context_length(256)
    writer.add_vocab_size(vocab)
    for name, shape in matrix_shapes(tied, vocab).items():
        weights = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        format = format_of(name, formats)
        if format == "F32":
            writer.add_tensor(f"{name}.weight", weights)
        else:
            writer.add_tensor(f"{name}.weight", quantize(weights, format), raw_dtype=GGMLQuantizationType[format])
    norms = ["output_norm"] + [f"blk.{i}.{n}" for i in range(LAYERS) for n in ("attn_norm", "ffn_norm")]
    for name in norms:
        writer.add_tensor(f"{name}.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _copy_tokenizer(source: gguf.GGUFReader, writer: gguf.GGUFWriter) -> int:
    """Copies `source`'s tokenizer.* fields into `writer`; returns its vocabulary's size."""
    for key, field in source.fields.items():
        if key.startswith("tokenizer."):
            sub_type = field.types[1] if len(field.types) > 1 else None
            writer.add_key_value(key, field.contents(), field.types[0], sub_type=sub_type)
    return len(source.fields["tokenizer.ggml.tokens"].contents())
