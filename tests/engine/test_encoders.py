"""Encoder families against sentence-transformers (goldens by tools/reference/tiny_encoders.py), an
input's embedding alone and inside a batch, and checkpoints the loader refuses."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine.errors import CheckpointError
from engine.tasks.encode.encoder_model import (
    EncoderRunner,
    LoadedEncoder,
    is_encoder_checkpoint,
    length_buckets,
    load_encoder,
)
from tests.engine.tiny_encoders import QUERY, SENTENCES, TINY_ENCODERS, build_tiny_encoder, encoder_tokenizer
from tests.engine.tiny_gguf_encoders import write_encoder_gguf
from text.encoder_inputs import longest_first

pytestmark = pytest.mark.slow  # encoders through XLA against goldens

GOLDENS = Path(__file__).parent.parent / "goldens" / "tiny_encoders"


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoadedEncoder]:
    root = tmp_path_factory.mktemp("encoders")
    return {name: load_encoder(build_tiny_encoder(name, root / name)) for name in TINY_ENCODERS}


@pytest.mark.parametrize("name", [n for n, (_, pooling, _) in TINY_ENCODERS.items() if pooling is not None])
def test_embeddings_match_sentence_transformers(encoders: dict[str, LoadedEncoder], name: str) -> None:
    encoder = encoders[name]
    got = EncoderRunner.for_encoder(encoder, 1024).run([encoder_tokenizer(encoder).encode_text(s) for s in SENTENCES])
    expected = np.array(json.loads((GOLDENS / f"{name}.json").read_text())["embeddings"], np.float32)
    cosine = (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert np.all(1 - cosine < 1e-4), 1 - cosine
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("name", [n for n, (_, pooling, _) in TINY_ENCODERS.items() if pooling is None])
def test_cross_encoder_scores_match_sentence_transformers(encoders: dict[str, LoadedEncoder], name: str) -> None:
    encoder = encoders[name]
    assert encoder.kind == "rerank"
    tokenizer = encoder_tokenizer(encoder)
    logits = EncoderRunner.for_encoder(encoder, 1024).run([tokenizer.encode_pair(QUERY, s) for s in SENTENCES])
    expected = np.array(json.loads((GOLDENS / f"{name}.json").read_text())["scores"], np.float32)
    np.testing.assert_allclose(1 / (1 + np.exp(-logits)), expected, atol=1e-5)


def test_declared_pooling_and_limits_are_read(encoders: dict[str, LoadedEncoder]) -> None:
    assert (encoders["bert_mean"].pooling, encoders["bert_mean"].normalize) == ("mean", True)
    assert (encoders["bert_cls"].pooling, encoders["bert_cls"].normalize) == ("cls", False)
    assert encoders["bert_mean"].max_tokens == 48  # sentence_bert_config.json's max_seq_length
    assert encoders["xlm_roberta"].config.position_offset == 2
    assert length_buckets(48) == (16, 32, 48)


def test_an_input_embeds_the_same_alone_and_in_a_batch_of_64_mixed_lengths(
    encoders: dict[str, LoadedEncoder],
) -> None:
    encoder = encoders["bert_mean"]
    runner = EncoderRunner.for_encoder(encoder, 64 * 48)
    rng = np.random.default_rng(0)
    tokenizer = encoder_tokenizer(encoder)
    inputs = [tokenizer.encode_text(" ".join(rng.choice(SENTENCES, rng.integers(1, 4)))[:150]) for _ in range(63)]
    inputs = [tokenizer.encode_text(SENTENCES[2]), *[i for i in inputs if len(i.token_ids) <= 48]][:64]
    alone = runner.run(inputs[:1])[0]
    batched = runner.run(inputs)[0]
    assert len({len(i.token_ids) for i in inputs}) > 5
    np.testing.assert_allclose(batched, alone, atol=1e-6)


def test_a_pipeline_module_it_cannot_run_is_refused_by_name(tmp_path: Path) -> None:
    directory = build_tiny_encoder("bert_mean", tmp_path / "m")
    modules = json.loads((directory / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (directory / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(CheckpointError, match="sentence_transformers.models.Dense"):
        load_encoder(directory)


def test_a_classifier_with_several_labels_is_not_a_cross_encoder(tmp_path: Path) -> None:
    directory = build_tiny_encoder("bert_cross_encoder", tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    config["id2label"] = {"0": "no", "1": "yes"}
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="2 labels"):
        load_encoder(directory)


def test_a_missing_tensor_is_named(tmp_path: Path) -> None:
    directory = build_tiny_encoder("bert_mean", tmp_path / "m")
    tensors = load_file(str(directory / "model.safetensors"))
    del tensors["encoder.layer.1.output.dense.bias"]
    save_file(tensors, str(directory / "model.safetensors"))
    with pytest.raises(CheckpointError, match="encoder.layer.1.output.dense.bias"):
        load_encoder(directory)


def test_longest_first_truncation_takes_tokens_off_the_longer_part_one_at_a_time() -> None:
    def one_at_a_time(lengths: list[int], budget: int) -> list[int]:
        lengths = list(lengths)
        while sum(lengths) > budget:
            lengths[lengths.index(max(lengths))] -= 1
        return lengths

    for budget in range(1, 20):
        for first in range(0, 25):
            assert longest_first([first], budget) == one_at_a_time([first], budget)
            for second in range(0, 25):
                assert longest_first([first, second], budget) == one_at_a_time([first, second], budget), (
                    first,
                    second,
                    budget,
                )


def test_a_pair_over_the_limit_is_cut_to_it_with_its_special_tokens(encoders: dict[str, LoadedEncoder]) -> None:
    encoder = encoders["bert_cross_encoder"]
    cut = encoder_tokenizer(encoder).encode_pair(QUERY, " ".join(["cat"] * 100), 20)
    assert len(cut.token_ids) == 20 and cut.token_ids.count(3) == 2  # [SEP] closes each part
    assert (
        cut.token_ids[: len(encoder_tokenizer(encoder).encode_text(QUERY).token_ids) - 1]
        == encoder_tokenizer(encoder).encode_text(QUERY).token_ids[:-1]
    )


# Beyond the goldens' sentences: capitals and full-width letters, a ligature, runs of spaces and an
# ideographic space, which XLM-RoBERTa's precompiled map and whitespace rules must treat alike.
UNUSUAL = ("ＴＨＥ ＣＡＴ  sat", "the \ufb01ne   road\u3000by the sea", "  blue  ")


@pytest.mark.parametrize("name", ["bert_mean", "xlm_roberta"])
@pytest.mark.parametrize(("half", "atol"), [(False, 1e-5), (True, 2e-3)])
def test_an_encoder_gguf_embeds_like_its_safetensors_directory(
    tmp_path: Path, name: str, half: bool, atol: float
) -> None:
    """A tiny encoder converted the way llama.cpp converts one: the same tokens, and the
    embeddings of sentence-transformers' goldens (float16 matrices within their rounding), unit
    length."""
    directory = build_tiny_encoder(name, tmp_path / name)
    path = write_encoder_gguf(directory, tmp_path / f"{name}.gguf", half)
    assert is_encoder_checkpoint(path)
    gguf_encoder, directory_encoder = load_encoder(path), load_encoder(directory)
    from_gguf, from_directory = encoder_tokenizer(gguf_encoder), encoder_tokenizer(directory_encoder)
    for sentence in (*SENTENCES, *UNUSUAL):
        assert from_gguf.encode_text(sentence) == from_directory.encode_text(sentence)
    assert from_gguf.encode_pair(QUERY, SENTENCES[3]) == from_directory.encode_pair(QUERY, SENTENCES[3])
    assert (gguf_encoder.pooling, gguf_encoder.normalize, gguf_encoder.max_tokens) == ("mean", True, 64)
    got = EncoderRunner.for_encoder(gguf_encoder, 1024).run([from_gguf.encode_text(s) for s in SENTENCES])
    expected = np.array(json.loads((GOLDENS / f"{name}.json").read_text())["embeddings"], np.float32)
    np.testing.assert_allclose(got, expected, atol=atol)


def test_an_xlm_roberta_gguf_cross_encoder_scores_like_sentence_transformers(tmp_path: Path) -> None:
    directory = build_tiny_encoder("xlm_roberta_cross_encoder", tmp_path / "cross")
    encoder = load_encoder(write_encoder_gguf(directory, tmp_path / "cross.gguf"))
    assert (encoder.kind, encoder.config.family) == ("rerank", "xlm-roberta")
    tokenizer = encoder_tokenizer(encoder)
    logits = EncoderRunner.for_encoder(encoder, 1024).run([tokenizer.encode_pair(QUERY, s) for s in SENTENCES])
    expected = np.array(json.loads((GOLDENS / "xlm_roberta_cross_encoder.json").read_text())["scores"], np.float32)
    np.testing.assert_allclose(1 / (1 + np.exp(-logits)), expected, atol=1e-5)


def test_a_bert_gguf_cross_encoder_is_refused_naming_the_way_to_serve_it(tmp_path: Path) -> None:
    """llama.cpp's converter drops BERT's pooler, which the classifier reads: no faithful scores."""
    directory = build_tiny_encoder("bert_cross_encoder", tmp_path / "cross")
    with pytest.raises(CheckpointError, match="pooler .* safetensors directory with --rerank-model"):
        load_encoder(write_encoder_gguf(directory, tmp_path / "cross.gguf"))
