"""tools/random_checkpoint.py's shapes and made-in-code tokenizers (any text encodes and decodes
back, every id of the vocabulary decodes, so a served random model's answers always turn into
text), and a Qwen2-shaped one written as a GGUF by tools/qwen2_gguf.py, as `make bench` serves it."""

import math
from pathlib import Path

import numpy as np
import pytest

from engine.checkpoints import read_gguf_metadata, tokenizer_from_gguf
from engine.model.loading.loader import load_model
from tools.qwen2_gguf import write_gguf
from tools.random_checkpoint import QWEN2, SHAPES, Shape, byte_level_tokenizer, config, tensor_shapes, write

TEXT = "Hello, wörld! 12345 你好 <|im_end|>"


@pytest.mark.parametrize("shape", [SHAPES["1b"], SHAPES["qwen2-0.5b"]], ids=["llama", "qwen2"])
def test_the_byte_level_tokenizer_round_trips_and_covers_its_vocabulary(shape: Shape) -> None:
    vocab, split = shape.vocab_size, shape.family.bpe_split
    tokenizer = byte_level_tokenizer(vocab, split)
    assert tokenizer.get_vocab_size() == vocab
    ids = tokenizer.encode(TEXT).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == TEXT
    assert ids[-1] == tokenizer.token_to_id("<|im_end|>")
    assert all(tokenizer.id_to_token(i) is not None for i in range(0, vocab, 997))
    byte_count = len(TEXT.encode()) - len("<|im_end|>") + 1
    # Llama's shapes take a token a byte (tools/device_bench.py sizes prompts so); Qwen2's merges.
    assert len(ids) == byte_count if split is None else len(ids) < byte_count


def test_the_qwen2_shape_is_qwen2_0_5b_instructs() -> None:
    shape = SHAPES["qwen2-0.5b"]
    fields = config(shape, "bfloat16")
    assert fields["architectures"] == ["Qwen2ForCausalLM"] and fields["model_type"] == "qwen2"
    expected = {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
    }
    assert {key: fields[key] for key in expected} == expected
    shapes = tensor_shapes(shape)
    assert shapes["model.layers.0.self_attn.k_proj.bias"] == (128,) and "lm_head.weight" not in shapes
    assert sum(math.prod(dims) for dims in shapes.values()) == 494_032_768  # Qwen2-0.5B's parameters
    assert "You are a helpful assistant." in shape.family.chat_template


def test_a_qwen2_checkpoint_as_a_gguf_is_the_same_model_and_tokenizer(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    write(folder, Shape(QWEN2, 64, 128, 2, 4, 2, 1000), "float32")
    gguf_file = write_gguf(folder, tmp_path / "model.gguf")
    metadata = read_gguf_metadata(gguf_file)
    assert metadata["general.architecture"] == "qwen2" and metadata["tokenizer.ggml.pre"] == "qwen2"
    assert metadata["tokenizer.chat_template"] == QWEN2.chat_template
    assert (
        tokenizer_from_gguf(metadata).encode(TEXT).ids == byte_level_tokenizer(1000, QWEN2.bpe_split).encode(TEXT).ids
    )
    from_gguf = load_model(gguf_file, cache_dir=tmp_path / "cache", progress=False)
    from_folder = load_model(folder, cache_dir=tmp_path / "cache", progress=False)
    assert from_gguf.config.model_type == "qwen2" and from_gguf.config.qkv_bias
    tokens, positions = np.arange(3, 19, dtype=np.int32)[None], np.arange(16, dtype=np.int32)[None]
    np.testing.assert_allclose(
        np.asarray(from_gguf.forward(tokens, positions)[0]),
        np.asarray(from_folder.forward(tokens, positions)[0]),
        atol=1e-5,
    )
