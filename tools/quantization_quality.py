"""What `--quantization w8a8` costs in accuracy: the same text through the float and the int8 model.

    python tools/quantization_quality.py [--model PATH] [--tokens N] [FILE ...]

Reports each model's perplexity on the text (default: README.md and docs/architecture.md of this
repository, the first N tokens), how often the int8 model's most likely next token equals the
float model's, and the mean KL divergence of its next-token distribution from the float one.
"""

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.checkpoint.loader import load_model  # noqa: E402
from engine.tokenizer import Tokenizer  # noqa: E402
from pooled.model_host import default_model_path  # noqa: E402


def next_token_logprobs(path: Path, quantization: str, tokens: list[int]) -> np.ndarray:
    model = load_model(path, progress=False, quantization=quantization)
    ids = jnp.asarray([tokens], jnp.int32)
    logits, _ = model.forward(ids, jnp.arange(len(tokens), dtype=jnp.int32)[None])
    return np.asarray(jax.nn.log_softmax(logits[0, :-1].astype(jnp.float32), axis=-1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2)")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens of text to score")
    parser.add_argument("files", nargs="*", type=Path, default=[REPO / "README.md", REPO / "docs" / "architecture.md"])
    args = parser.parse_args()
    path = args.model or default_model_path()
    text = "\n\n".join(f.read_text(encoding="utf-8") for f in args.files)
    tokens = Tokenizer.from_gguf_file(path).encode(text)[: args.tokens]
    targets = np.asarray(tokens[1:])
    floats = next_token_logprobs(path, "none", tokens)
    int8 = next_token_logprobs(path, "w8a8", tokens)

    def perplexity(logprobs: np.ndarray) -> float:
        return float(np.exp(-np.take_along_axis(logprobs, targets[:, None], axis=1).mean()))

    agreement = float(np.mean(floats.argmax(-1) == int8.argmax(-1)))
    kl = float(np.mean(np.sum(np.exp(floats) * (floats - int8), axis=-1)))
    print(f"model: {path.name}, {len(tokens)} tokens of {', '.join(f.name for f in args.files)}")
    print(f"perplexity: float {perplexity(floats):.2f}, w8a8 {perplexity(int8):.2f}")
    print(f"same most likely next token: {100 * agreement:.1f} % of positions; mean KL(float || w8a8) {kl:.4f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
