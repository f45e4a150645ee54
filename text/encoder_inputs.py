"""How an embedding or rerank model reads its inputs: a text, a (query, document) pair or a
client's token ids, wrapped in the tokenizer's own special tokens and, when asked, cut to a limit
the way Hugging Face's "longest_first" truncation cuts them.

The same for the encoder families (engine/tasks/encode/encoder_model.py) and a decoder's embedding pass
(engine/tasks/encode/decoder_embedding.py), which differ only in their tokenizers and token types.
"""

from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer as BackendTokenizer

from engine.api import EncoderInput
from text.tokenizer import Tokenizer


class EncoderTokenizer:
    """Turns requests' texts into an encoder's `EncoderInput`s, with its tokenizer (set to no
    truncation and no padding) and the number of segment types it embeds."""

    def __init__(self, tokenizer: BackendTokenizer, token_types: int) -> None:
        self.tokenizer = tokenizer
        self.token_types = token_types

    @classmethod
    def of(cls, tokenizer: Tokenizer, token_types: int) -> "EncoderTokenizer":
        """A chat model's tokenizer, read as an encoder's (a decoder's embedding pass)."""
        backend = BackendTokenizer.from_str(tokenizer.to_json())
        backend.no_truncation()
        backend.no_padding()
        return cls(backend, token_types)

    def encode_text(self, text: str, truncate_to: int | None = None) -> EncoderInput:
        """`text` as the model reads it; with `truncate_to`, cut to that many tokens (special ones kept)."""
        if truncate_to is None:
            return self._input(self.tokenizer.encode(text))
        return self._truncated([text], truncate_to)

    def encode_pair(self, first: str, second: str, truncate_to: int | None = None) -> EncoderInput:
        """A (query, document) pair; with `truncate_to`, cut to that many tokens, the longer part first."""
        if truncate_to is None:
            return self._input(self.tokenizer.encode(first, second))
        return self._truncated([first, second], truncate_to)

    def token_input(self, token_ids: Sequence[int]) -> EncoderInput:
        """Token ids a client sent, used as they are (no special tokens added)."""
        return EncoderInput(tuple(token_ids), (0,) * len(token_ids))

    def _truncated(self, texts: list[str], limit: int) -> EncoderInput:
        """One text or a pair cut to `limit` tokens with the special tokens, the longer part first
        (Hugging Face's "longest_first"), then wrapped in the special tokens."""
        parts = [self.tokenizer.encode(text, add_special_tokens=False) for text in texts]
        budget = max(limit - self.tokenizer.num_special_tokens_to_add(len(parts) == 2), 1)
        for part, length in zip(parts, longest_first([len(part.ids) for part in parts], budget), strict=True):
            part.truncate(length)
        return self._input(self.tokenizer.post_process(parts[0], parts[1] if len(parts) == 2 else None))

    def _input(self, encoding: Any) -> EncoderInput:
        # A model with one token type (XLM-RoBERTa, a decoder) gives a pair's second segment type 0 as well.
        top = self.token_types - 1
        return EncoderInput(tuple(encoding.ids), tuple(min(t, top) for t in encoding.type_ids))


def longest_first(lengths: list[int], budget: int) -> list[int]:
    """The lengths left when tokens come off the longer part one at a time (the first on a tie)
    until they fit `budget`, as Hugging Face's "longest_first" truncation does."""
    if sum(lengths) <= budget:
        return lengths
    if len(lengths) == 1:
        return [budget]
    first, second = lengths
    if min(first, second) <= budget // 2:  # the shorter part fits whole
        return [first, budget - first] if first <= second else [budget - second, second]
    return [budget // 2, budget - budget // 2]
