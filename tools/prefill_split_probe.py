"""Does a prompt's prefill depend on where it is split? The default model's last-position logits of a
chat prompt prefilled in one chunk, against the same prompt prefilled in two chunks split at each
page boundary given (as a prefix-cache hit or a chunked prefill would split it).

    .venv/bin/python tools/prefill_split_probe.py --quantization w4a8 --kv-cache-dtype bfloat16

Prints the largest logit difference per split: 0.0 means the split changes nothing, which a
seeded request needs to draw the same tokens whatever the prefix cache holds.
"""

from __future__ import annotations

import argparse

import numpy as np

from engine.device.runner import DeviceRunner
from engine.device.runner_api import PrefillChunk
from engine.engine_config import EngineConfig
from engine.model.loading.loader import load_model
from pooled.hosting.model_host import default_model_path
from text import Tokenizer

PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWrite a short story about a robot who learns to paint.<|im_end|>\n<|im_start|>assistant\n"
)
PAGE_SIZE = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quantization", default="none", choices=("none", "w8a8", "w4a8"))
    parser.add_argument("--kv-cache-dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--splits", default="16,32,48,64", help="page boundaries to split at")
    args = parser.parse_args()
    path = default_model_path()
    model = load_model(path, progress=False, quantization=args.quantization)
    prompt = Tokenizer.from_gguf_file(path).encode(PROMPT)
    config = EngineConfig(
        decode_lanes=1, max_context=1024, page_size=PAGE_SIZE, prefill_chunk=512, kv_cache_dtype=args.kv_cache_dtype
    )
    runner = DeviceRunner(model, config, 64)
    pages = [list(range(first, first + -(-len(prompt) // PAGE_SIZE))) for first in (1, 20)]

    def last_logits(chunks: list[PrefillChunk]) -> np.ndarray:
        logits = None
        for chunk in chunks:
            logits = runner.prefill([chunk])
        return np.asarray(logits)[0]

    whole = last_logits([PrefillChunk(prompt, 0, pages[0])])
    print(f"{len(prompt)}-token prompt, quantization {args.quantization}, KV cache {args.kv_cache_dtype}")
    for split in map(int, args.splits.split(",")):
        parts = [PrefillChunk(prompt[:split], 0, pages[1]), PrefillChunk(prompt[split:], split, pages[1])]
        print(f"split at {split}: largest logit difference {float(np.max(np.abs(last_logits(parts) - whole))):.3g}")


if __name__ == "__main__":
    main()
