"""Guided decoding: grammars (JSON schema, regex, choice, Lark, forced tool calls) → engine Constraints.

llguidance compiles a grammar against the model's tokenizer and, per generated token, computes the
bitmask of allowed tokens; the engine applies it on the device. A grammar is validated once per
request (an invalid one is a 400 naming the field), then each row gets its own matcher.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import llguidance
import numpy as np

from engine.api import Constraint
from handlers.api_error import ApiError
from handlers.generation.tool_calls import ToolCallFormat
from text import Tokenizer

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions


@functools.lru_cache(maxsize=4)
def guidance_tokenizer(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of the vocabulary (about half a second to build, so once per tokenizer).

    The end tokens are the ones the engine stops on, so a finished grammar lets the row end.
    """
    # The Hugging Face `tokenizers` JSON is the one description both sides read.
    return llguidance.LLTokenizer(tokenizer.to_json(), eos_token=sorted(tokenizer.stop_token_ids))


class GrammarConstraint:
    """The seam's `Constraint` for one row, over an llguidance matcher."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str) -> None:
        self._matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        self._words = (tokenizer.vocab_size + 31) // 32

    def fill_mask(self, out: np.ndarray) -> None:
        # The engine's vocabulary may be padded past the tokenizer's: those ids are never allowed.
        own = out[: self._words]
        self._matcher.unsafe_compute_mask_ptr(own.ctypes.data, own.nbytes)
        out[self._words :] = 0

    def accept(self, token_id: int) -> None:
        self._matcher.consume_token(token_id)

    def is_finished(self) -> bool:
        return bool(self._matcher.is_stopped())


def constraint_factory(tokenizer: Tokenizer, grammar: str, param: str) -> Callable[[], Constraint]:
    """Validate `grammar` now (400 naming `param` if it does not compile); build a matcher per row later."""
    if not tokenizer.stop_token_ids:
        message = (
            f"'{param}' needs a model that declares an end-of-sequence token (a finished grammar ends the "
            "output with it); this model declares none"
        )
        raise ApiError(400, message, code="constraint_unsupported", param=param)
    try:
        guidance = guidance_tokenizer(tokenizer)
    except ValueError as unreadable:  # a tokenizer llguidance cannot read (e.g. one without a decoder)
        message = f"'{param}' cannot be enforced with this model's tokenizer: {unreadable}"
        raise ApiError(400, message, code="constraint_unsupported", param=param) from unreadable
    error = llguidance.LLMatcher.validate_grammar(grammar, guidance)
    if error:
        raise ApiError(400, f"Invalid constraint in '{param}': {error}", code="invalid_constraint", param=param)
    return lambda: GrammarConstraint(guidance, grammar)


# JSON as models were trained to write it (`{"a": 1, "b": 2}`): no free whitespace, which small
# models otherwise fill without end. Keywords llguidance does not implement (`propertyNames`,
# some `format`s, as coding agents' tool schemas use) are left unenforced rather than refused.
JSON_OPTIONS: Mapping[str, Any] = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": True,
}


def json_schema_grammar(schema: Mapping[str, Any], param: str) -> str:
    try:
        grammar: str = llguidance.LLMatcher.grammar_from_json_schema(
            dict(schema), defaults=cast("JsonCompileOptions", dict(JSON_OPTIONS))
        )
    except ValueError as error:
        message = f"Invalid JSON schema in '{param}': {error}"
        raise ApiError(400, message, code="invalid_constraint", param=param) from None
    return grammar


ANY_JSON_OBJECT: Mapping[str, Any] = {"type": "object"}


def regex_grammar(pattern: str) -> str:
    grammar: str = llguidance.LLMatcher.grammar_from_regex(pattern)
    return grammar


def choice_grammar(choices: Sequence[str]) -> str:
    return regex_grammar("|".join(f"({re.escape(choice)})" for choice in choices))


def lark_grammar(source: str) -> str:
    grammar: str = llguidance.LLMatcher.grammar_from_lark(source)
    return grammar


def forced_tool_calls_grammar(
    functions: Sequence[tuple[str, Mapping[str, Any] | None]], syntax: ToolCallFormat, parallel: bool
) -> str:
    """A grammar that admits only calls of `functions` ((name, parameters schema) pairs) in `syntax`.

    Each call is `{"name": <one of the names>, "arguments": <that function's parameters>}`, so
    even a model too small to follow the prompt produces a call whose arguments validate.
    """
    call_schema = {
        "x-guidance": JSON_OPTIONS,
        "anyOf": [
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": parameters or ANY_JSON_OBJECT},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for name, parameters in functions
        ],
    }
    lark = syntax.forced_calls_lark("call", parallel) + f"\ncall: %json {json.dumps(call_schema)}\n"
    return lark_grammar(lark)
