"""Goldens for the tiny per-family checkpoints: logits from transformers in float32.

Weights come from `tests.engine.tiny_checkpoints` (numpy, fixed seed), so the tests rebuild the
identical checkpoint without torch and compare the engine's logits with the stored ones.
"""

import json
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

from tests.engine.tiny_checkpoints import TINY_MODELS, build_tiny_checkpoint, tiny_prompt


def reference_logits(checkpoint: Path, tokens: np.ndarray) -> np.ndarray:
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy()


def main(out_dir: Path) -> None:
    target = out_dir / "tiny"
    target.mkdir(parents=True, exist_ok=True)
    tokens = tiny_prompt()
    with tempfile.TemporaryDirectory() as tmp:
        for name in TINY_MODELS:
            logits = reference_logits(build_tiny_checkpoint(name, Path(tmp) / name), tokens)
            golden = {
                "transformers_version": transformers.__version__,
                "tokens": tokens.tolist(),
                "logits": logits.astype(np.float32).tolist(),
            }
            (target / f"{name}.json").write_text(json.dumps(golden) + "\n", encoding="utf-8")
            print(f"wrote {target / name}.json {logits.shape}")
