"""Chat templates (Jinja, as shipped with Hugging Face and GGUF models) rendered to prompt token ids.

Templates are untrusted code, so they run in Jinja's immutable sandbox under two budgets:
  * instructions: every loop iteration, attribute/item lookup, call and filter costs one;
  * output size: the rendered text, and any string or list built along the way, in characters.

Control tokens come only from the template's own text. Any control-token spelling inside the
caller's data (message text, tool definitions, ...) is swapped for a private marker before rendering
and restored afterwards inside plain-text spans, so it is tokenized as ordinary characters.
"""

import datetime
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from engine.tokenizer.tokenizer import Tokenizer

DEFAULT_INSTRUCTION_BUDGET = 1_000_000
DEFAULT_OUTPUT_CHARS_BUDGET = 4_000_000
# `**` is checked before it runs: a huge power is a single, unbudgetable step.
MAX_INTEGER_EXPONENT = 4096

_ITERATE_FILTER = "_pooled_budgeted_iterate"
_MEASURE_FILTER = "_pooled_budgeted_measure"
# Private-use code points: a protected string in caller data becomes OPEN index CLOSE.
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"


class TemplateError(Exception):
    """The chat template failed (raised, broke the sandbox rules or exceeded a budget)."""


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
        self._tokenizer = tokenizer
        self._instruction_budget = instruction_budget
        self._output_chars_budget = output_chars_budget
        self._markers = _Markers(tokenizer.control_tokens)
        by_length = sorted(tokenizer.control_tokens, key=len, reverse=True)
        self._control_pattern = re.compile("|".join(map(re.escape, by_length))) if by_length else None
        try:
            self._template = _ENVIRONMENT.from_string(source)
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
        budget = _Budget(self._instruction_budget, self._output_chars_budget)
        reset = _BUDGET.set(budget)
        chunks: list[str] = []
        try:
            size = 0
            for chunk in self._template.generate(context):
                size += len(chunk)
                if size > budget.max_chars:
                    raise TemplateError(f"chat template output exceeds {budget.max_chars} characters")
                chunks.append(chunk)
        except TemplateError:
            raise
        except Exception as error:  # a template is untrusted code: anything it raises is its own failure
            raise TemplateError(f"chat template failed: {type(error).__name__}: {error}") from error
        finally:
            _BUDGET.reset(reset)
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


@dataclass
class _Budget:
    instructions_left: int
    max_chars: int

    def step(self) -> None:
        self.instructions_left -= 1
        if self.instructions_left < 0:
            raise TemplateError("chat template exceeds its instruction budget")

    def measure(self, value: Any) -> None:
        self.step()
        if _size(value, self.max_chars) > self.max_chars:
            raise TemplateError(f"chat template builds a value over {self.max_chars} characters")

    def check_binop(self, operator: str, left: Any, right: Any) -> None:
        self.step()
        if operator == "**" and isinstance(right, int) and abs(right) > MAX_INTEGER_EXPONENT:
            raise TemplateError(f"chat template raises to a power over {MAX_INTEGER_EXPONENT}")
        if operator == "*":
            count, sequence = (left, right) if isinstance(left, int) else (right, left)
            if isinstance(count, int) and count * _size(sequence, self.max_chars) > self.max_chars:
                raise TemplateError(f"chat template builds a value over {self.max_chars} characters")


_BUDGET: ContextVar[_Budget] = ContextVar("chat_template_budget")


def _size(value: Any, limit: int) -> int:
    """Characters in a (nested) value, stopping once past `limit`."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        items: Iterable[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return 0
    total = 0
    for item in items:
        total += _size(item, limit - total) + 1
        if total > limit:
            break
    return total


def _budgeted_iterate(iterable: Iterable[Any]) -> Iterator[Any]:
    budget = _BUDGET.get()
    for item in iterable:
        budget.step()
        yield item


def _budgeted_measure(value: Any) -> Any:
    _BUDGET.get().measure(value)
    return value


class _Instrument(NodeTransformer):
    """Rewrites a parsed template so loops and value-building expressions pay into the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _filtered(node.iter, _ITERATE_FILTER)
        return node

    def visit_CallBlock(self, node: nodes.CallBlock) -> nodes.Node:
        # The compiler needs `call` to stay a Call node to pass `caller`; instrument only inside it.
        self.generic_visit(node.call)
        for field in ("args", "defaults", "body"):
            setattr(node, field, [self.visit(child) for child in getattr(node, field)])
        return node

    def visit_Filter(self, node: nodes.Filter) -> nodes.Node:
        self.generic_visit(node)
        # Filter blocks (`{% filter %}`, `{% set x | f %}`) hold a Filter without an operand.
        return node if node.node is None else _filtered(node, _MEASURE_FILTER)

    def _measured(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        return _filtered(node, _MEASURE_FILTER)

    visit_Call = visit_Concat = visit_Add = visit_Mul = _measured


def _filtered(node: nodes.Node, filter_name: str) -> nodes.Filter:
    return nodes.Filter(node, filter_name, [], [], None, None, lineno=node.lineno)


class _GenerationTag(Extension):
    """transformers' `{% generation %}` marks assistant text for training masks; rendering ignores it."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


class _BudgetedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        template: nodes.Template = _Instrument().visit(super()._parse(source, name, filename))
        return template

    def getattr(self, obj: Any, attribute: str) -> Any:
        _BUDGET.get().step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _BUDGET.get().step()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _BUDGET.get().step()
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _BUDGET.get().check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)


def _raise_exception(message: str) -> NoReturn:
    raise TemplateError(f"chat template raised: {message}")


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' `tojson`: plain JSON, unlike Jinja's HTML-escaping built-in."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(date_format: str) -> str:
    return datetime.datetime.now().strftime(date_format)


def _environment() -> ImmutableSandboxedEnvironment:
    # trim_blocks/lstrip_blocks and the extensions match transformers, which templates are written for.
    environment = _BudgetedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _GenerationTag])
    environment.filters.update(
        {"tojson": _tojson, _ITERATE_FILTER: _budgeted_iterate, _MEASURE_FILTER: _budgeted_measure}
    )
    environment.globals.update({"raise_exception": _raise_exception, "strftime_now": _strftime_now})
    return environment


_ENVIRONMENT = _environment()
