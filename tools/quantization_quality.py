"""What `--quantization w8a8` / `w4a8` / `gguf` and `--kv-cache-dtype bfloat16` cost in accuracy: the
same text through the float32 model and each variant.

    python tools/quantization_quality.py [--model PATH] [--reference PATH] [--tokens N] [FILE ...]

Reports each variant's perplexity on the text (default: README.md and docs/architecture.md of this
repository, the first N tokens), how often its most likely next token equals the float32 model's,
and the mean KL divergence of its next-token distribution from the float32 one. The float32 model
is `--reference` (e.g. the file a K-quant was made from) or the model's own weights dequantized.
The block variants are those `--quantization auto` serves the file in: w4a8 for a Q4_1 file, gguf
for one whose matrices are all in other block formats.
"""

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.model.layers.kv_cache import init_layer_caches  # noqa: E402
from engine.model.loading.loader import LoadedModel, load_model  # noqa: E402
from pooled.hosting.model_host import default_model_path  # noqa: E402
from text import Tokenizer  # noqa: E402

# name: (quantization, KV cache dtype, one token per step); attention runs in the cache's dtype, as
# in the engine. w4a8 takes the text as one prompt and a token at a time as decoding does: the same
# matmul function on a CPU with the native kernels, XLA's int8 rounding of the weights without them
# (engine/model/int4.py).
VARIANTS = {
    "w8a8": ("w8a8", jnp.float32, False),
    "bfloat16 KV": ("none", jnp.bfloat16, False),
    "w8a8 + bfloat16 KV": ("w8a8", jnp.bfloat16, False),
}
BLOCK_VARIANTS = {
    quantization: {
        f"{quantization} + bfloat16 KV, as a prompt": (quantization, jnp.bfloat16, False),
        f"{quantization} + bfloat16 KV, decoding": (quantization, jnp.bfloat16, True),
    }
    for quantization in ("w4a8", "gguf")
}


def next_token_logprobs(
    model: LoadedModel, kv_dtype: jnp.dtype, tokens: list[int], one_token_steps: bool
) -> np.ndarray:
    ids = jnp.asarray([tokens], jnp.int32)
    positions = jnp.arange(len(tokens), dtype=jnp.int32)[None]
    cache = init_layer_caches(model.config, 1, len(tokens), kv_dtype)
    if one_token_steps:
        step = jax.jit(model.apply)
        rows = []
        for t in range(len(tokens) - 1):
            logits, cache = step(model.params, ids[:, t : t + 1], positions[:, t : t + 1], cache)
            rows.append(logits[0, 0])
        logits = jnp.stack(rows)[None]
    else:
        logits, _ = model.forward(ids, positions, cache)
        logits = logits[:, :-1]
    return np.asarray(jax.nn.log_softmax(logits[0].astype(jnp.float32), axis=-1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2)")
    parser.add_argument("--reference", type=Path, default=None, help="float32 reference (default: --model's)")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens of text to score")
    parser.add_argument("files", nargs="*", type=Path, default=[REPO / "README.md", REPO / "docs" / "architecture.md"])
    args = parser.parse_args()
    path = args.model or default_model_path()
    text = "\n\n".join(f.read_text(encoding="utf-8") for f in args.files)
    tokens = Tokenizer.from_gguf_file(path).encode(text)[: args.tokens]
    targets = np.asarray(tokens[1:])
    served = load_model(path, progress=False, quantization="auto")
    variants = VARIANTS | BLOCK_VARIANTS.get(served.quantization, {})
    models = {served.quantization: served}
    for quantization in {v[0] for v in variants.values()} - set(models):
        models[quantization] = load_model(path, progress=False, quantization=quantization)
    reference = load_model(args.reference or path, progress=False, quantization="none")
    floats = next_token_logprobs(reference, jnp.float32, tokens, False)

    def perplexity(logprobs: np.ndarray) -> float:
        return float(np.exp(-np.take_along_axis(logprobs, targets[:, None], axis=1).mean()))

    print(f"model: {path.name}, {len(tokens)} tokens of {', '.join(f.name for f in args.files)}")
    print(f"float32 ({(args.reference or path).name}): perplexity {perplexity(floats):.2f}")
    if args.reference:
        own = next_token_logprobs(models["none"], jnp.float32, tokens, False)
        print(f"float32 ({path.name}, its blocks dequantized): perplexity {perplexity(own):.2f}")
    for name, (quantization, kv_dtype, one_token_steps) in variants.items():
        variant = next_token_logprobs(models[quantization], kv_dtype, tokens, one_token_steps)
        agreement = float(np.mean(floats.argmax(-1) == variant.argmax(-1)))
        kl = float(np.mean(np.sum(np.exp(floats) * (floats - variant), axis=-1)))
        print(
            f"{name}: perplexity {perplexity(variant):.2f}, same most likely next token as float32 at "
            f"{100 * agreement:.1f} % of positions, mean KL(float32 || {name}) {kl:.4f} nats"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
