"""Guided decoding masks from llguidance, as the engine applies them."""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer as BackendTokenizer

from handlers.api_error import ApiError
from handlers.generation.constraints import (
    choice_grammar,
    constraint_factory,
    forced_tool_calls_grammar,
    json_schema_grammar,
)
from handlers.generation.tool_calls import FORMATS, HermesParser
from tests.engine.tiny_encoders import tokenizer_json
from text import Tokenizer

PADDING_WORDS = 3  # the engine's vocabulary may be padded past the tokenizer's


def allowed(mask: np.ndarray, token_id: int) -> bool:
    return bool((int(mask[token_id // 32]) >> (token_id % 32)) & 1)


def walk(tokenizer: Tokenizer, grammar: str, text: str) -> tuple[list[bool], bool, np.ndarray]:
    """Feed `text`'s tokens through a fresh constraint: was each allowed, is the grammar finished."""
    constraint = constraint_factory(tokenizer, grammar, "test")()
    mask = np.full((tokenizer.vocab_size + 31) // 32 + PADDING_WORDS, -1, dtype=np.int32)
    verdicts = []
    for token_id in tokenizer.encode(text):
        constraint.fill_mask(mask)
        verdicts.append(allowed(mask, token_id))
        constraint.accept(token_id)
    constraint.fill_mask(mask)
    return verdicts, constraint.is_finished(), mask


def test_json_schema_admits_compact_valid_json_only(tokenizer: Tokenizer) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    grammar = json_schema_grammar(schema, "response_format")
    verdicts, finished, mask = walk(tokenizer, grammar, '{"a": 12}')
    assert all(verdicts) and finished
    assert not mask[-PADDING_WORDS:].any()
    assert not all(walk(tokenizer, grammar, '{"a": "x"}')[0])
    assert not all(walk(tokenizer, grammar, '{ "a": 1}')[0])  # no free whitespace


def test_choice(tokenizer: Tokenizer) -> None:
    assert walk(tokenizer, choice_grammar(["yes", "no"]), "no")[1]
    assert not all(walk(tokenizer, choice_grammar(["yes", "no"]), "maybe")[0])


def test_invalid_schema_names_the_field(tokenizer: Tokenizer) -> None:
    with pytest.raises(ApiError) as error:
        constraint_factory(tokenizer, json_schema_grammar({"type": "objekt"}, "p"), "response_format.schema")
    assert error.value.status == 400 and error.value.param == "response_format.schema"


def test_forced_call_is_parsed_back(tokenizer: Tokenizer) -> None:
    parameters = {"type": "object", "properties": {"city": {"enum": ["Paris"]}}, "required": ["city"]}
    grammar = forced_tool_calls_grammar([("weather", parameters)], FORMATS["hermes"], parallel=False)
    text = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    verdicts, finished, _ = walk(tokenizer, grammar, text)
    assert all(verdicts) and finished
    assert not all(walk(tokenizer, grammar, text.replace("weather", "other"))[0])
    parsed = HermesParser().push(text)
    assert [(call.name, call.arguments) for call in parsed.calls] == [("weather", '{"city": "Paris"}')]


@pytest.mark.parametrize(
    ("eos", "says"), [((), "end-of-sequence"), ((3,), "cannot be enforced with this model's tokenizer")]
)
def test_a_grammar_a_models_tokenizer_cannot_carry_is_a_400(eos: tuple[int, ...], says: str) -> None:
    """llguidance ends a finished grammar with the model's end token, and reads its tokenizer's
    decoder: a model with no end token, or a tokenizer without a decoder, takes no grammar."""
    backend = BackendTokenizer.from_str(tokenizer_json(decoder=True))  # a WordPiece vocabulary, no decoder
    model_tokenizer = Tokenizer(backend, bos_token_id=None, eos_token_ids=eos)
    with pytest.raises(ApiError) as error:
        constraint_factory(model_tokenizer, choice_grammar(["yes", "no"]), "response_format")
    assert error.value.status == 400 and error.value.param == "response_format"
    assert says in error.value.message
