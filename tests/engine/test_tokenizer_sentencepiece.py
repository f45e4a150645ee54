"""A GGUF `llama` (SentencePiece BPE, byte fallback) vocabulary against SentencePiece itself."""

import json
from pathlib import Path

import pytest

from text import IncrementalDetokenizer, Tokenizer

GOLDEN = json.loads((Path(__file__).parents[1] / "goldens" / "tokenizer_spm.json").read_text(encoding="utf-8"))
CASES = GOLDEN["cases"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_gguf_metadata(GOLDEN["metadata"])


@pytest.mark.parametrize("case", CASES, ids=[repr(c["text"][:24]) for c in CASES])
def test_ids_and_text_equal_sentencepiece(tokenizer: Tokenizer, case: dict) -> None:
    assert tokenizer.encode(case["text"]) == case["ids"]
    assert tokenizer.decode(case["ids"]) == case["decoded"]
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.push(token_id) for token_id in case["ids"]] + [detokenizer.flush()]
    assert "".join(deltas) == case["decoded"]


def test_bos_is_added_by_default_for_sentencepiece(tokenizer: Tokenizer) -> None:
    assert tokenizer.encode("hi", add_special_tokens=True)[0] == tokenizer.bos_token_id == 1
    assert tokenizer.stop_token_ids == {2}
