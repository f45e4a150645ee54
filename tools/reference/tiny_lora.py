"""Goldens for the tiny LoRA adapters: transformers + peft logits of each adapter on its tiny base
checkpoint, in float32 on CPU torch.

Adapters come from `tests.engine.tiny_lora` and bases from `tests.engine.tiny_checkpoints` (numpy,
fixed seeds), so the tests rebuild both without torch and compare the engine's logits.
"""

import json
import tempfile
from pathlib import Path

import numpy as np
import peft
import torch
import transformers
from peft import PeftModel
from transformers import AutoModelForCausalLM

from tests.engine.tiny_checkpoints import build_tiny_checkpoint, tiny_prompt
from tests.engine.tiny_lora import TINY_ADAPTERS, build_tiny_adapter


def main(out_dir: Path) -> None:
    target = out_dir / "tiny_lora"
    target.mkdir(parents=True, exist_ok=True)
    tokens = tiny_prompt()
    with tempfile.TemporaryDirectory() as tmp:
        for name, (base, _) in TINY_ADAPTERS.items():
            checkpoint = build_tiny_checkpoint(base, Path(tmp) / base)
            model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
            adapted = PeftModel.from_pretrained(model, build_tiny_adapter(name, Path(tmp) / name))
            adapted.eval()
            with torch.no_grad():
                logits = adapted(input_ids=torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy()
            golden = {
                "transformers_version": transformers.__version__,
                "peft_version": peft.__version__,
                "tokens": tokens.tolist(),
                "logits": logits.astype(np.float32).tolist(),
            }
            (target / f"{name}.json").write_text(json.dumps(golden) + "\n", encoding="utf-8")
            print(f"wrote {target / name}.json {logits.shape}")
