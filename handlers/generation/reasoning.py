"""Reasoning split: a thinking model's `<think>…</think>` text apart from its answer, incrementally.

Qwen3-style models open their answer with `<think>`, or their chat template already put it at the
end of the prompt (then the output starts inside the reasoning). Only a `<think>` at the very
start opens reasoning; after `</think>` everything is answer, and the blank lines the model puts
between the two are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from handlers.generation.text_scan import partial_tail
from text import Tokenizer

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def model_thinks(tokenizer: Tokenizer) -> bool:
    """Whether the vocabulary has the think tags as single tokens, as thinking families do."""
    return all(len(tokenizer.encode(tag)) == 1 for tag in (THINK_OPEN, THINK_CLOSE))


def prompt_opens_reasoning(prompt_text: str) -> bool:
    """The rendered prompt ends inside an open `<think>` (the template started the reasoning)."""
    return prompt_text.rfind(THINK_OPEN) > prompt_text.rfind(THINK_CLOSE)


@dataclass
class Split:
    reasoning: str = ""
    content: str = ""


class ReasoningSplitter:
    """Text in, (reasoning, content) pieces out; holds back a tail that may be part of a tag."""

    def __init__(self, starts_inside: bool) -> None:
        self._state = "reasoning" if starts_inside else "start"
        self._held = ""

    @property
    def in_reasoning(self) -> bool:
        return self._state == "reasoning"

    def push(self, text: str) -> Split:
        buffer = self._held + text
        self._held = ""
        split = Split()
        while buffer:
            if self._state == "start":
                stripped = buffer.lstrip()
                if stripped.startswith(THINK_OPEN):
                    buffer = stripped[len(THINK_OPEN) :]
                    self._state = "reasoning"
                elif THINK_OPEN.startswith(stripped):
                    self._held = buffer
                    return split
                else:
                    self._state = "content"
            elif self._state == "reasoning":
                end = buffer.find(THINK_CLOSE)
                if end >= 0:
                    split.reasoning += buffer[:end]
                    buffer = buffer[end + len(THINK_CLOSE) :]
                    self._state = "after_reasoning"
                else:
                    keep = partial_tail(buffer, (THINK_CLOSE,))
                    split.reasoning += buffer[: len(buffer) - keep]
                    self._held = buffer[len(buffer) - keep :]
                    return split
            elif self._state == "after_reasoning":
                buffer = buffer.lstrip()
                if buffer:
                    self._state = "content"
            else:
                split.content += buffer
                buffer = ""
        return split

    def flush(self) -> Split:
        """What is held back once generation ends: an unfinished tag is plain text of its part."""
        held, self._held = self._held, ""
        return Split(reasoning=held) if self._state == "reasoning" else Split(content=held)
