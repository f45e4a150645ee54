"""Text to token ids and back: tokenizers, streaming detokenization and chat templates."""

from text.chat_template import (
    DEFAULT_INSTRUCTION_BUDGET,
    DEFAULT_OUTPUT_CHARS_BUDGET,
    ChatTemplate,
    RenderedPrompt,
    TemplateError,
)
from text.incremental import IncrementalDetokenizer
from text.tokenizer import Tokenizer

__all__ = [
    "DEFAULT_INSTRUCTION_BUDGET",
    "DEFAULT_OUTPUT_CHARS_BUDGET",
    "ChatTemplate",
    "IncrementalDetokenizer",
    "RenderedPrompt",
    "TemplateError",
    "Tokenizer",
]
