"""Goldens for the tiny vision-language checkpoints: transformers' float32 logits over a prompt
with two images, and its greedy continuation.

Weights, image patches and prompt come from `tests.engine.tiny_vision_checkpoints` (numpy, fixed
seeds), so the tests rebuild them without torch.
"""

import json
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForImageTextToText

from tests.engine.tiny_vision_checkpoints import (
    IMAGE_GRIDS,
    IMAGE_TOKEN,
    TINY_VISION_MODELS,
    build_tiny_vision_checkpoint,
    tiny_image_patches,
    tiny_vision_prompt,
)

GREEDY_TOKENS = 8


def main(out_dir: Path) -> None:
    target = out_dir / "tiny"
    target.mkdir(parents=True, exist_ok=True)
    prompt = tiny_vision_prompt()
    ids = torch.tensor([prompt], dtype=torch.long)
    inputs = {
        "input_ids": ids,
        "pixel_values": torch.from_numpy(np.concatenate(tiny_image_patches())),
        "image_grid_thw": torch.tensor(IMAGE_GRIDS, dtype=torch.long),
        "mm_token_type_ids": (ids == IMAGE_TOKEN).int(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name in TINY_VISION_MODELS:
            checkpoint = build_tiny_vision_checkpoint(name, Path(tmp) / name)
            model = AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()
            with torch.no_grad():
                logits = model(**inputs).logits.float().numpy()[0]
                generated = model.generate(**inputs, max_new_tokens=GREEDY_TOKENS, do_sample=False, eos_token_id=None)
            golden = {
                "transformers_version": transformers.__version__,
                "tokens": prompt,
                "logits": logits.astype(np.float32).tolist(),
                "greedy": generated[0, len(prompt) :].tolist(),
            }
            (target / f"{name}.json").write_text(json.dumps(golden) + "\n", encoding="utf-8")
            print(f"wrote {target / name}.json {logits.shape} greedy {golden['greedy']}")
