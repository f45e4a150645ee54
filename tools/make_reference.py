"""Writes golden files under tests/goldens/ from reference implementations (needs the `reference` extra).

python tools/make_reference.py WHICH [--out tests/goldens]

WHICH: tiny, encoders, lora, minilm, smollm2, tokenizer, vision, vision_models or all.
"""

import argparse
import importlib
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
GENERATORS = {
    "tiny": "tools.reference.tiny_families",
    "encoders": "tools.reference.tiny_encoders",
    "lora": "tools.reference.tiny_lora",
    "minilm": "tools.reference.minilm",
    "smollm2": "tools.reference.smollm2_gguf",
    "tokenizer": "tools.reference.tokenizer_corpus",
    "vision": "tools.reference.vision_preprocess",
    "vision_models": "tools.reference.tiny_vision",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=[*GENERATORS, "all"])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "goldens")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO_ROOT))
    names = list(GENERATORS) if args.which == "all" else [args.which]
    for name in names:
        # Imported lazily: each generator pulls in heavy reference dependencies of its own.
        importlib.import_module(GENERATORS[name]).main(args.out)


if __name__ == "__main__":
    main()
