"""Streaming detokenization: text deltas from one token at a time."""

from text.tokenizer import Tokenizer

# What decoders produce for bytes that do not (yet) form a whole UTF-8 character.
_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    """Turns generated token ids into text deltas whose concatenation equals `decode(all ids)`.

    Decoding one token alone is wrong twice over: a character can span several byte tokens, and
    SentencePiece decoders treat a leading space differently at the start of a text. So each step
    decodes a short window of recent tokens twice (with and without the new ones) and emits the
    difference, holding text back while it ends in an incomplete character.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._tokens: list[int] = []
        self._window_start = 0  # tokens decoded for context only
        self._emitted_end = 0  # tokens before this have been emitted as text

    def push(self, token_id: int) -> str:
        self._tokens.append(token_id)
        delta = self._pending_text()
        if delta.endswith(_INCOMPLETE):
            return ""
        self._window_start, self._emitted_end = self._emitted_end, len(self._tokens)
        return delta

    def flush(self) -> str:
        """Whatever is held back, incomplete characters included; call once generation ends."""
        delta = self._pending_text()
        self._window_start = self._emitted_end = len(self._tokens)
        return delta

    def _pending_text(self) -> str:
        window = self._tokens[self._window_start :]
        emitted = self._decode(self._tokens[self._window_start : self._emitted_end])
        return self._decode(window)[len(emitted) :]

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special_tokens)
