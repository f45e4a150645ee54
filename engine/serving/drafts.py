"""Prompt-lookup drafts: a row's next tokens guessed from its own earlier tokens.

An agent's answer often copies text its context already holds (a file it edits, earlier tool
output). When a row's last n tokens occurred before in its prompt or output, the tokens that
followed their latest earlier occurrence are a cheap guess at what comes next; the runner checks
the guess in one step of the model over all of it (engine/device/step.py, `verify`), so every guessed
token the model agrees with costs no step of its own. The longest n of NGRAM_SIZES that matches
wins: a longer match is likelier to go on copying.

Only the engine thread uses a `PromptLookup` (one per drafting row, holding the row's own token
list, which its decode steps, engine/serving/decode_steps.py, append to).
"""

from collections.abc import Sequence

# Lengths of the suffix looked up, longest first. A one-token match proposes too many wrong guesses
# (every common token recurs); at two tokens and up most matches in code and copied text go on.
NGRAM_SIZES = (3, 2)


class PromptLookup:
    """Drafts for one row from an index of its tokens' n-grams, kept up to date as the row grows."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self._tokens = tokens  # the row's own list: the index catches up with what it appends
        self._indexed = 0  # the index knows each n-gram that ends before this position
        # An n-gram (a tuple of n tokens) → the position of the token after its latest occurrence.
        self._follows: dict[tuple[int, ...], int] = {}

    def draft(self, limit: int) -> Sequence[int]:
        """Up to `limit` tokens that followed the latest earlier occurrence of the row's longest
        matching suffix; empty when no suffix of NGRAM_SIZES occurred before."""
        if limit <= 0:
            return ()
        tokens = self._tokens
        self._catch_up()
        for n in NGRAM_SIZES:
            if len(tokens) > n:
                start = self._follows.get(tuple(tokens[-n:]))
                if start is not None:
                    draft = tokens[start : start + limit]
                    # An image's tokens (below zero: engine/serving/media.py) are never drawn.
                    return next((draft[:i] for i, token in enumerate(draft) if token < 0), draft)
        return ()

    def _catch_up(self) -> None:
        """Indexes each n-gram whose next token is known: the row's last n-grams wait for theirs,
        so a lookup of the suffix finds an earlier occurrence, never itself."""
        tokens, follows = self._tokens, self._follows
        for end in range(max(self._indexed, 1), len(tokens)):
            for n in NGRAM_SIZES:
                if end >= n:
                    follows[tuple(tokens[end - n : end])] = end
        self._indexed = len(tokens)
