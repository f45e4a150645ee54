"""Responses tools → the functions the model is offered, and `tool_choice` → the shared `ToolUse`.

- `function` tools are offered as they are.
- `namespace` tools (Codex's nested functions) are flattened: each member is offered under its own
  name, and a call to it comes back with the namespace set. Two namespaces with a member of the
  same name collide; the later one wins.
- `custom` tools (free-form input, e.g. Codex's `apply_patch`) are offered as a function with one
  string argument, `input`. When `tool_choice` names a custom tool, the whole answer is its input,
  generated under the tool's grammar (`format: {"type": "grammar", "syntax": "lark"|"regex"}`).
- Every other type (`web_search`, `tool_search`, `file_search`, …) names a tool the server cannot
  run: it is accepted and left out of the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.api import Constraint
from generated import models
from handlers.api_error import ApiError
from handlers.generation.constraints import constraint_factory, lark_grammar, regex_grammar
from handlers.generation.prompt import FunctionTool
from handlers.generation.tool_calls import ToolCall
from handlers.generation.tool_choice import ToolMode, ToolUse, tool_use
from handlers.openai_responses.items import new_item_id
from text import Tokenizer

CUSTOM_INPUT_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
}

ToolChoice = str | models.ResponseToolChoiceObjectParam | None


@dataclass(frozen=True)
class CustomTool:
    name: str
    format: Mapping[str, Any]  # `{"type": "text"}` or `{"type": "grammar", "syntax", "definition"}`

    def input_constraint(self, tokenizer: Tokenizer) -> Callable[[], Constraint] | None:
        """The grammar a forced call's input is generated under; None for free text."""
        if self.format.get("type") != "grammar":
            return None
        param = "tools.format.definition"
        definition = str(self.format.get("definition", ""))
        syntax = self.format.get("syntax", "lark")
        if syntax not in ("lark", "regex"):
            raise ApiError(400, f"Custom tool grammar syntax '{syntax}' is not supported (lark or regex).", param=param)
        grammar = lark_grammar(definition) if syntax == "lark" else regex_grammar(definition)
        return constraint_factory(tokenizer, grammar, param)


@dataclass(frozen=True)
class ResponseTools:
    functions: tuple[FunctionTool, ...] = ()  # what the model is offered, custom tools included
    custom: Mapping[str, CustomTool] = field(default_factory=dict)
    namespaces: Mapping[str, str] = field(default_factory=dict)  # member function name → its namespace

    def call_item(self, call: ToolCall) -> dict[str, Any]:
        """A parsed call as a Responses output item (`function_call`, or `custom_tool_call` for a custom tool)."""
        if call.name in self.custom:
            try:
                arguments = json.loads(call.arguments)
            except ValueError:  # a call that streamed, its arguments never completed
                arguments = None
            text = arguments.get("input") if isinstance(arguments, dict) else None
            input_text = text if isinstance(text, str) else call.arguments
            return custom_call_item(new_item_id("custom_tool_call"), call.id, call.name, input_text)
        item: dict[str, Any] = {
            "id": new_item_id("function_call"),
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "status": "completed",
        }
        if call.name in self.namespaces:
            item["namespace"] = self.namespaces[call.name]
        return item


def custom_call_item(item_id: str, call_id: str, name: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "custom_tool_call", "call_id": call_id, "name": name, "input": text}


def response_tools(tools: Sequence[models.ResponseToolParam]) -> ResponseTools:
    functions: list[FunctionTool] = []
    custom: dict[str, CustomTool] = {}
    namespaces: dict[str, str] = {}
    for tool in tools:
        if tool.type == "function" and tool.name:
            functions.append(FunctionTool(tool.name, tool.description, tool.parameters))
        elif tool.type == "custom" and tool.name:
            custom[tool.name] = CustomTool(tool.name, tool.format or {"type": "text"})
            functions.append(FunctionTool(tool.name, tool.description, CUSTOM_INPUT_PARAMETERS))
        elif tool.type == "namespace" and tool.name:
            for member in tool.tools or []:
                if member.name and member.type in (None, "function"):
                    functions.append(FunctionTool(member.name, member.description, member.parameters))
                    namespaces[member.name] = tool.name
    return ResponseTools(tuple(functions), custom, namespaces)


@dataclass(frozen=True)
class ToolPlan:
    use: ToolUse
    forced_custom: CustomTool | None = None  # the answer is this tool's input, not text


def tool_plan(tools: ResponseTools, choice: ToolChoice, parallel: bool) -> ToolPlan:
    if choice is None or isinstance(choice, str):
        mode: ToolMode = "none" if choice == "none" else "required" if choice == "required" else "auto"
        return ToolPlan(tool_use(tools.functions, mode, parallel))
    if choice.type == "custom":
        forced = tools.custom.get(choice.name or "")
        if forced is None:
            message = f"'tool_choice' names the custom tool '{choice.name}', which the request does not offer."
            raise ApiError(400, message, param="tool_choice")
        return ToolPlan(ToolUse(), forced)
    if choice.type == "function":
        return ToolPlan(tool_use(tools.functions, "required", parallel, named=choice.name or ""))
    if choice.type == "allowed_tools":
        names = {str(entry.get("name")) for entry in choice.tools or []}
        mode = "required" if choice.mode == "required" else "auto"
        return ToolPlan(tool_use([t for t in tools.functions if t.name in names], mode, parallel))
    # A hosted tool (`{"type": "web_search"}`, …) the server cannot run: the model chooses freely.
    return ToolPlan(tool_use(tools.functions, "auto", parallel))
