"""The Jinja sandbox chat templates run in, with an instruction budget and a size budget.

Templates are untrusted code. They run in Jinja's immutable sandbox, compiled without constant
folding (which would run template code at load time, outside any budget), and the parsed template
is rewritten so that work pays into a per-render `Budget`:
  * instructions: every loop iteration, attribute or item lookup, call and filter costs one;
  * size: the rendered text, and every string or list built along the way, in characters. Calls
    that can blow a value up in one step (`*`, `**`, `%`, `replace`, `join`, padding, indenting,
    format widths) are checked before they run, from sizes that are cheap to compute.
"""

import datetime
import inspect
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

DEFAULT_INSTRUCTION_BUDGET = 1_000_000
DEFAULT_OUTPUT_CHARS_BUDGET = 4_000_000
# `**` on integers is checked before it runs: a huge power is a single, unbudgetable step.
MAX_INTEGER_EXPONENT = 4096

_ITERATE_FILTER = "_pooled_budgeted_iterate"
_MEASURE_FILTER = "_pooled_budgeted_measure"
_CHECKED_FILTER = "_pooled_budgeted_filter"
_PADDING_CALLS = frozenset({"center", "ljust", "rjust", "zfill"})


class TemplateError(Exception):
    """The chat template failed (raised, broke the sandbox rules or exceeded a budget)."""


@dataclass
class Budget:
    instructions_left: int
    max_chars: int

    def step(self) -> None:
        self.instructions_left -= 1
        if self.instructions_left < 0:
            raise TemplateError("chat template exceeds its instruction budget")

    def check_size(self, chars: int) -> None:
        if chars > self.max_chars:
            raise TemplateError(f"chat template builds a value over {self.max_chars} characters")

    def measure(self, value: Any) -> None:
        self.step()
        self.check_size(_size(value, self.max_chars))

    def check_binop(self, operator: str, left: Any, right: Any) -> None:
        self.step()
        if operator == "**" and isinstance(right, int) and abs(right) > MAX_INTEGER_EXPONENT:
            raise TemplateError(f"chat template raises to a power over {MAX_INTEGER_EXPONENT}")
        if operator == "*":
            count, sequence = (left, right) if isinstance(left, int) else (right, left)
            if isinstance(count, int):
                self.check_size(count * _size(sequence, self.max_chars))
        if operator == "%" and isinstance(left, str):
            self._check_format(left)

    def check_call(self, name: str, target: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Before `target.name(*args)` (a method) or `target | name(*args)` (a filter) runs."""
        self.step()
        widths = [v for v in (*args, *kwargs.values()) if isinstance(v, int) and not isinstance(v, bool)]
        if any(abs(width) > self.max_chars for width in widths):
            raise TemplateError(f"chat template passes {name} a size over {self.max_chars}")
        width = max(widths, default=0)
        if name == "replace" and isinstance(target, str) and len(args) >= 2:
            old, new = str(args[0]), str(args[1])
            hits = target.count(old) if old else len(target) + 1
            self.check_size(len(target) + hits * (len(new) - len(old)))
        elif name == "join":
            # `separator.join(sequence)` as a method; `sequence | join(separator)` as a filter.
            if isinstance(target, str):
                sequence, separator = (args[0] if args else ()), target
            else:
                sequence, separator = target, (args[0] if args else "")
            if isinstance(sequence, (list, tuple)) and isinstance(separator, str):
                self.check_size(_size(sequence, self.max_chars) + len(separator) * len(sequence))
        elif name == "format" and isinstance(target, str):
            self._check_format(target)
        elif name in _PADDING_CALLS:
            self.check_size(width)
        elif name in ("indent", "expandtabs") and isinstance(target, str):
            self.check_size(len(target) + (target.count("\n") + target.count("\t") + 1) * width)
        elif name == "tojson":
            self.check_size((_size(target, self.max_chars) + 1) * (1 + width))

    def _check_format(self, template: str) -> None:
        # A width or precision in a format spec pads the result up to that many characters.
        self.check_size(max((int(digits) for digits in re.findall(r"\d+", template)), default=0))


_BUDGET: ContextVar[Budget] = ContextVar("chat_template_budget")


@contextmanager
def budgeted(budget: Budget) -> Iterator[Budget]:
    """Charges template code run inside the block to `budget`."""
    reset = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(reset)


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


# The rewrite's filters take the context so Jinja never evaluates them (or what they wrap) at compile time.
@jinja2.pass_context
def _budgeted_iterate(context: Context, iterable: Iterable[Any]) -> Iterator[Any]:
    budget = _BUDGET.get()
    for item in iterable:
        budget.step()
        yield item


@jinja2.pass_context
def _budgeted_measure(context: Context, value: Any) -> Any:
    _BUDGET.get().measure(value)
    return value


@jinja2.pass_context
def _budgeted_filter(context: Context, value: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    _BUDGET.get().check_call(name, value, args, kwargs)
    return context.environment.call_filter(name, value, args, kwargs, context=context)


class _Instrument(NodeTransformer):
    """Rewrites a parsed template so loops, calls and value-building expressions pay into the budget."""

    def __init__(self, known_filters: Iterable[str]) -> None:
        self._known_filters = frozenset(known_filters)

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
        # Filter blocks (`{% filter %}`, `{% set x | f %}`) hold a Filter without an operand; an
        # unknown name is left for the compiler to report.
        if node.node is None or node.name not in self._known_filters:
            return node
        node.args = [nodes.Const(node.name), *node.args]
        node.name = _CHECKED_FILTER
        return _filtered(node, _MEASURE_FILTER)

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
    intercepted_binops = frozenset({"*", "**", "%"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        template: nodes.Template = _Instrument(self.filters).visit(super()._parse(source, name, filename))
        return template

    def getattr(self, obj: Any, attribute: str) -> Any:
        _BUDGET.get().step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _BUDGET.get().step()
        return super().getitem(obj, argument)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        # The sandbox hands out `str.format` wrapped; the string it formats is the wrapped method's `__self__`.
        method = inspect.unwrap(__obj)
        _BUDGET.get().check_call(getattr(method, "__name__", ""), getattr(method, "__self__", None), args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
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


def _sandbox() -> ImmutableSandboxedEnvironment:
    # trim_blocks/lstrip_blocks and the extensions match transformers, which templates are written for.
    environment = _BudgetedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _GenerationTag], optimized=False
    )
    environment.filters.update({"tojson": _tojson})
    environment.filters.update(
        {_ITERATE_FILTER: _budgeted_iterate, _MEASURE_FILTER: _budgeted_measure, _CHECKED_FILTER: _budgeted_filter}
    )
    environment.globals.update({"raise_exception": _raise_exception, "strftime_now": _strftime_now})
    return environment


SANDBOX = _sandbox()
