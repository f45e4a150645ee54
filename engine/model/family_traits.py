"""What makes a family differ from the Llama layout, declared by each decoder family as
`DecoderFamily.traits` (the families package; this shared module knows none of them).

Hugging Face hard-codes these in a family's modeling code rather than writing them into
config.json. `ModelConfig.from_hf` turns them, with config.json, into the flags the layers read;
the family's conversion and the GGUF reader read the rest.
"""

from dataclasses import dataclass
from typing import Any

# How RoPE pairs a head's dimensions. The layers implement HF's "rotate_half" (the first half of a
# head pairs with the second); a family with another style needs its own rotation first.
ROPE_STYLES = ("rotate_half",)


@dataclass(frozen=True)
class FamilyTraits:
    # q, k and v projections always carry biases and o none, whatever config.json's
    # `attention_bias` says (Qwen2).
    qkv_bias: bool = False
    # A per-head RMSNorm on queries and keys before RoPE (Qwen3).
    qk_norm: bool = False
    # Sparse layers (`ModelConfig.is_moe_layer`) route each token to its top-k experts, whose HF
    # tensors the family converts (`Family.convert_experts`).
    moe: bool = False
    # Whether the output head is the embedding matrix where config.json does not say.
    tie_word_embeddings: bool = False
    rope_style: str = "rotate_half"
    # llama.cpp's converter reorders each head's q and k rows into interleaved rotary pairs for this
    # family; the GGUF reader puts them back in HF's order.
    gguf_interleaved_qk: bool = False
    # HF config entries that llama.cpp assumes for this family and its GGUF files do not record.
    gguf_config: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.rope_style not in ROPE_STYLES:
            raise ValueError(f"RoPE style {self.rope_style!r} is not implemented (known: {', '.join(ROPE_STYLES)})")
