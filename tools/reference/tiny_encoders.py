"""Goldens for the tiny encoder checkpoints and the tiny decoders served as embedding models:
sentence-transformers' embeddings of a few sentences, and its cross-encoder's scores of (query,
sentence) pairs, in float32 on CPU torch.

Weights come from `tests.engine.tiny_encoders` and `tests.engine.tiny_decoder_embedders` (numpy,
fixed seed), so the tests rebuild the identical checkpoints without torch and compare the engine's
numbers with the stored ones.
"""

import json
import tempfile
from pathlib import Path

import numpy as np
import sentence_transformers
from sentence_transformers import CrossEncoder, SentenceTransformer

from tests.engine.tiny_decoder_embedders import TINY_DECODER_EMBEDDERS, build_tiny_decoder_embedder
from tests.engine.tiny_encoders import QUERY, SENTENCES, TINY_ENCODERS, build_tiny_encoder


def main(out_dir: Path) -> None:
    target = out_dir / "tiny_encoders"
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, pooling, _) in TINY_ENCODERS.items():
            directory = build_tiny_encoder(name, Path(tmp) / name)
            golden: dict[str, object] = {"sentence_transformers_version": sentence_transformers.__version__}
            if pooling is None:
                # One label: sentence-transformers applies a sigmoid to the logit.
                model = CrossEncoder(str(directory), device="cpu")
                golden["scores"] = np.asarray(model.predict([(QUERY, s) for s in SENTENCES]), np.float32).tolist()
            else:
                model = SentenceTransformer(str(directory), device="cpu")
                golden["embeddings"] = np.asarray(model.encode(list(SENTENCES)), np.float32).tolist()
            (target / f"{name}.json").write_text(json.dumps(golden) + "\n", encoding="utf-8")
            print(f"wrote {target / name}.json")
        for name in TINY_DECODER_EMBEDDERS:
            directory = build_tiny_decoder_embedder(name, Path(tmp) / name)
            model = SentenceTransformer(str(directory), device="cpu")
            embeddings = np.asarray(model.encode(list(SENTENCES)), np.float32).tolist()
            golden = {"sentence_transformers_version": sentence_transformers.__version__, "embeddings": embeddings}
            (target / f"{name}.json").write_text(json.dumps(golden) + "\n", encoding="utf-8")
            print(f"wrote {target / name}.json")
