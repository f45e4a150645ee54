"""A decoder's embedding pass against sentence-transformers (goldens by
tools/reference/tiny_encoders.py): last-token pooling with normalisation as Qwen3-Embedding
declares it, from a checkpoint saved as the base model, and mean pooling; an input embeds the
same alone and inside a batch of mixed lengths."""

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine.model.loading.loader import load_model
from engine.tasks.encode.decoder_embedding import (
    DecoderEmbedding,
    decoder_embedding,
    decoder_embedding_runner,
    is_embedding_decoder,
)
from engine.tasks.encode.encoder_model import EncoderRunner
from tests.engine.tiny_decoder_embedders import TINY_DECODER_EMBEDDERS, build_tiny_decoder_embedder
from tests.engine.tiny_encoders import SENTENCES
from text import Tokenizer
from text.encoder_inputs import EncoderTokenizer

pytestmark = pytest.mark.slow  # decoder embedding passes through XLA

GOLDENS = Path(__file__).parent.parent / "goldens" / "tiny_encoders"


def embedder(
    directory: Path, cache: Path, batch_tokens: int = 1024, quantization: str = "none"
) -> tuple[DecoderEmbedding, EncoderRunner, EncoderTokenizer]:
    model = load_model(directory, cache_dir=cache, progress=False, quantization=quantization)
    embedding = decoder_embedding(model, 2048)
    tokenizer = EncoderTokenizer.of(Tokenizer.for_checkpoint(model.source, model.tokenizer_dir), embedding.token_types)
    return embedding, decoder_embedding_runner(model, embedding, batch_tokens), tokenizer


@pytest.mark.parametrize("name", list(TINY_DECODER_EMBEDDERS))
def test_embeddings_match_sentence_transformers(tmp_path: Path, name: str) -> None:
    directory = build_tiny_decoder_embedder(name, tmp_path / name)
    assert is_embedding_decoder(directory)
    _, runner, tokenizer = embedder(directory, tmp_path / "cache")
    got = runner.run([tokenizer.encode_text(s) for s in SENTENCES])
    expected = np.array(json.loads((GOLDENS / f"{name}.json").read_text())["embeddings"], np.float32)
    cosine = (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert np.all(1 - cosine < 1e-4), 1 - cosine
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_pooling_and_limits_are_the_checkpoints(tmp_path: Path) -> None:
    last, _, tokenizer = embedder(build_tiny_decoder_embedder("qwen3_embedding", tmp_path / "q"), tmp_path / "cache")
    mean, _, _ = embedder(build_tiny_decoder_embedder("llama_mean_embedding", tmp_path / "l"), tmp_path / "cache")
    assert (last.pooling, last.normalize, last.max_tokens, last.kind) == ("last", True, 48, "embedding")
    assert (mean.pooling, mean.normalize) == ("mean", False)
    # the tokenizer's own end token, as the model was trained
    assert tokenizer.encode_text("the cat").token_ids[-1] == 3


def test_a_chat_model_without_sentence_transformers_files_pools_its_last_token_normalised(
    tiny_checkpoint: Callable[[str], Path], tmp_path: Path
) -> None:
    directory = tiny_checkpoint("qwen3")
    assert not is_embedding_decoder(directory)
    model = load_model(directory, cache_dir=tmp_path, progress=False)
    embedding = decoder_embedding(model, 32)
    assert (embedding.pooling, embedding.normalize, embedding.max_tokens) == ("last", True, 32)


def test_an_input_embeds_the_same_alone_and_in_a_batch_of_64_mixed_lengths(tmp_path: Path) -> None:
    directory = build_tiny_decoder_embedder("qwen3_embedding", tmp_path / "q")
    _, runner, tokenizer = embedder(directory, tmp_path / "cache", batch_tokens=64 * 48)
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(SENTENCES, rng.integers(1, 4))) for _ in range(200)]
    inputs = [i for i in (tokenizer.encode_text(t) for t in texts) if len(i.token_ids) <= 48]
    inputs = [tokenizer.encode_text(SENTENCES[2]), *inputs][:64]
    assert len(inputs) == 64 and len({len(i.token_ids) for i in inputs}) > 5
    alone = runner.run(inputs[:1])[0]
    batched = runner.run(inputs)
    np.testing.assert_allclose(batched[0], alone, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=-1), 1.0, atol=1e-5)


@pytest.mark.parametrize(("quantization", "least_cosine"), [("w8a8", 0.999), ("w4a8", 0.95)])
def test_quantized_weights_embed_close_to_the_float_weights(
    tmp_path: Path, quantization: str, least_cosine: float
) -> None:
    """The pass runs on int8 and 4-bit weights too (the default model's), within their rounding
    of a 64-wide random model."""
    directory = build_tiny_decoder_embedder("qwen3_embedding", tmp_path / "q")
    _, floats, tokenizer = embedder(directory, tmp_path / "cache")
    _, quantized, _ = embedder(directory, tmp_path / "cache", quantization=quantization)
    inputs = [tokenizer.encode_text(s) for s in SENTENCES]
    cosine = (floats.run(inputs) * quantized.run(inputs)).sum(-1)
    assert np.all(cosine > least_cosine), cosine
