"""Chat templates (Jinja, as shipped with Hugging Face and GGUF models) rendered to prompt token ids.

Templates run in `text.template_sandbox` under an instruction budget and a size budget.

Control tokens come only from the template's own text. Any control-token spelling inside the
caller's data (message text, tool definitions, ...) is swapped for a private marker before rendering
and restored afterwards inside plain-text spans, so it is tokenized as ordinary characters.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2

from text.template_sandbox import (
    DEFAULT_INSTRUCTION_BUDGET,
    DEFAULT_OUTPUT_CHARS_BUDGET,
    SANDBOX,
    Budget,
    TemplateError,
    budgeted,
)
from text.tokenizer import Tokenizer

__all__ = [
    "DEFAULT_INSTRUCTION_BUDGET",
    "DEFAULT_OUTPUT_CHARS_BUDGET",
    "ChatTemplate",
    "RenderedPrompt",
    "TemplateError",
]

# Private-use code points: a protected string in caller data becomes OPEN index CLOSE.
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"


@dataclass(frozen=True)
class RenderedPrompt:
    text: str  # for debugging and logs; the model is fed `token_ids`
    token_ids: list[int]


class ChatTemplate:
    """One model's chat template, compiled once and rendered per request."""

    def __init__(
        self,
        source: str,
        tokenizer: Tokenizer,
        *,
        instruction_budget: int = DEFAULT_INSTRUCTION_BUDGET,
        output_chars_budget: int = DEFAULT_OUTPUT_CHARS_BUDGET,
    ) -> None:
        self.source = source
        self._tokenizer = tokenizer
        self._instruction_budget = instruction_budget
        self._output_chars_budget = output_chars_budget
        self._markers = _Markers(tokenizer.control_tokens)
        by_length = sorted(tokenizer.control_tokens, key=len, reverse=True)
        self._control_pattern = re.compile("|".join(map(re.escape, by_length))) if by_length else None
        try:
            self._template = SANDBOX.from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise TemplateError(f"chat template does not compile: {error.message} (line {error.lineno})") from error

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        extra_context: Mapping[str, Any] | None = None,
    ) -> RenderedPrompt:
        """Render and tokenize; `extra_context` carries template switches such as `enable_thinking`."""
        context = {
            **self._markers.hide(dict(extra_context or {})),
            "messages": self._markers.hide(list(messages)),
            "tools": self._markers.hide(list(tools)) if tools is not None else None,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self._tokenizer.bos_token or "",
            "eos_token": self._tokenizer.eos_token or "",
        }
        rendered = self._render_text(context)
        return RenderedPrompt(text=self._markers.reveal(rendered), token_ids=self._tokenize(rendered))

    def _render_text(self, context: dict[str, Any]) -> str:
        chunks: list[str] = []
        size = 0
        try:
            with budgeted(Budget(self._instruction_budget, self._output_chars_budget)) as budget:
                for chunk in self._template.generate(context):
                    size += len(chunk)
                    if size > budget.max_chars:
                        raise TemplateError(f"chat template output exceeds {budget.max_chars} characters")
                    chunks.append(chunk)
        except TemplateError:
            raise
        except Exception as error:  # a template is untrusted code: anything it raises is its own failure
            detail = " ".join(str(error).split())
            raise TemplateError(f"chat template failed: {type(error).__name__}: {detail}") from error
        return "".join(chunks)

    def _tokenize(self, rendered: str) -> list[int]:
        """Control tokens from the template's text, everything between them as plain text."""
        ids: list[int] = []
        start = 0
        matches = self._control_pattern.finditer(rendered) if self._control_pattern else iter(())
        for match in matches:
            ids += self._tokenizer.encode(self._markers.reveal(rendered[start : match.start()]))
            ids.append(self._tokenizer.control_tokens[match.group()])
            start = match.end()
        return ids + self._tokenizer.encode(self._markers.reveal(rendered[start:]))


class _Markers:
    """Hides control-token spellings in caller data behind markers, and brings them back."""

    def __init__(self, control_tokens: Iterable[str]) -> None:
        # The marker's own opening character is protected too, so caller text cannot forge a marker.
        self._protected = sorted(control_tokens, key=len, reverse=True) + [_MARK_OPEN]
        self._find = re.compile("|".join(map(re.escape, self._protected)))
        self._index = {text: index for index, text in enumerate(self._protected)}
        self._marker = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_CLOSE}")

    def hide(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._find.sub(lambda m: f"{_MARK_OPEN}{self._index[m.group()]}{_MARK_CLOSE}", value)
        if isinstance(value, Mapping):
            return {self.hide(key): self.hide(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.hide(item) for item in value]
        return value

    def reveal(self, text: str) -> str:
        return self._marker.sub(lambda m: self._protected[int(m.group(1))], text)
