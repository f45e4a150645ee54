"""Text to token ids and back: tokenizers, streaming detokenization and chat templates."""

from engine.tokenizer.chat_template import (
    DEFAULT_INSTRUCTION_BUDGET,
    DEFAULT_OUTPUT_CHARS_BUDGET,
    ChatTemplate,
    RenderedPrompt,
    TemplateError,
)
from engine.tokenizer.incremental import IncrementalDetokenizer
from engine.tokenizer.tokenizer import Tokenizer

__all__ = [
    "DEFAULT_INSTRUCTION_BUDGET",
    "DEFAULT_OUTPUT_CHARS_BUDGET",
    "ChatTemplate",
    "IncrementalDetokenizer",
    "RenderedPrompt",
    "TemplateError",
    "Tokenizer",
]
