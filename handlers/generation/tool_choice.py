"""Which tools a request offers and whether it must call one: each API maps its `tool_choice` here.

`none` offers no tools (they are left out of the prompt and nothing is parsed as a call); `auto`
offers them and reads calls from the answer; `required` (OpenAI `required` or a named function,
Anthropic `any` or `tool`) also constrains the answer to calls of the forced tools.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from engine.api import Constraint
from handlers.api_error import ApiError
from handlers.generation.constraints import constraint_factory, forced_tool_calls_grammar
from handlers.generation.prompt import FunctionTool
from handlers.generation.tool_calls import ToolCallFormat
from text import Tokenizer

ToolMode = Literal["none", "auto", "required"]


@dataclass(frozen=True)
class ToolUse:
    offered: tuple[FunctionTool, ...] = ()
    mode: ToolMode = "none"
    forced: tuple[FunctionTool, ...] = ()  # with mode "required": the tools a call may name
    parallel: bool = True

    @property
    def parses_calls(self) -> bool:
        return self.mode != "none" and bool(self.offered)

    def constraint(self, tokenizer: Tokenizer, syntax: ToolCallFormat) -> Callable[[], Constraint] | None:
        if self.mode != "required":
            return None
        grammar = forced_tool_calls_grammar([(t.name, t.parameters) for t in self.forced], syntax, self.parallel)
        return constraint_factory(tokenizer, grammar, "tool_choice")


def tool_use(
    tools: Sequence[FunctionTool], mode: ToolMode, parallel: bool, named: str | None = None, param: str = "tool_choice"
) -> ToolUse:
    """`named` forces that one tool (mode must be "required"); an unknown name is a 400."""
    if mode == "none" or not tools:
        if mode == "required":
            raise ApiError(400, f"'{param}' requires a tool call but the request offers no tools.", param=param)
        return ToolUse()
    forced: tuple[FunctionTool, ...] = ()
    if mode == "required":
        forced = tuple(t for t in tools if named is None or t.name == named)
        if not forced:
            raise ApiError(400, f"'{param}' names the tool '{named}', which the request does not offer.", param=param)
    return ToolUse(offered=tuple(tools), mode=mode, forced=forced, parallel=parallel and named is None)
