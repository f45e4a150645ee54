"""Chat prompts: messages (and tools) → the chat template → prompt token ids.

Every API first converts its conversation to one neutral shape, the one Hugging Face chat
templates read: `{"role", "content": str, "tool_calls": [{"id", "type": "function", "function":
{"name", "arguments": dict}}], "tool_call_id", "reasoning_content"}` with roles system, user,
assistant and tool.

Tools go through the template when it renders them (found by rendering a probe tool once per
template). Otherwise pooled's own format stands in (documented here): a
system-prompt section in the Hermes/Qwen wording (the tools' JSON inside `<tools></tools>`,
calls as `<tool_call>{"name", "arguments"}</tool_call>`), earlier calls written into their
assistant message in that syntax, and tool results as user messages inside
`<tool_response></tool_response>`. A call sent back whose arguments are not a JSON object is
kept as text in its message, never refused.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from handlers.api_error import ApiError
from handlers.generation.reasoning import model_thinks, prompt_opens_reasoning
from handlers.generation.tool_calls import FORMATS, ToolCallFormat
from text import ChatTemplate, TemplateError, Tokenizer

Message = dict[str, Any]

_PROBE_TOOL_NAME = "pooled_probe_tool_4f1c"

TOOLS_SYSTEM_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str | None
    parameters: Mapping[str, Any] | None

    def as_template_tool(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters or {"type": "object"}}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ChatPrompt:
    token_ids: tuple[int, ...]
    text: str
    tool_format: ToolCallFormat  # the syntax the model writes calls in
    thinks: bool  # the model's answer may open with reasoning
    starts_in_reasoning: bool  # the template already opened the reasoning


@dataclass(frozen=True)
class _TemplateTraits:
    renders_tools: bool
    tool_format: ToolCallFormat


@functools.lru_cache(maxsize=4)
def _traits(template: ChatTemplate) -> _TemplateTraits:
    probe = FunctionTool(_PROBE_TOOL_NAME, "probe", {"type": "object", "properties": {}})
    try:
        text = template.render([{"role": "user", "content": "x"}], tools=[probe.as_template_tool()]).text
    except TemplateError:
        text = ""
    renders_tools = _PROBE_TOOL_NAME in text
    hermes = "<tool_call>" in text or not renders_tools
    return _TemplateTraits(renders_tools, FORMATS["hermes" if hermes else "llama3_json"])


def render_chat(
    template: ChatTemplate | None,
    tokenizer: Tokenizer,
    messages: Sequence[Message],
    tools: Sequence[FunctionTool] = (),
    template_switches: Mapping[str, Any] | None = None,
    add_generation_prompt: bool = True,
) -> ChatPrompt:
    """Render the conversation; a template that fails is a 400 naming its error."""
    if template is None:
        raise ApiError(
            400,
            "This model ships no chat template, so it cannot take chat messages; use /v1/completions with a prompt.",
            code="no_chat_template",
            param="messages",
        )
    traits = _traits(template)
    if traits.renders_tools:
        conversation = [_with_calls_as_template_sees_them(m, traits.tool_format) for m in messages]
        template_tools = [tool.as_template_tool() for tool in tools] or None
    else:
        conversation = _with_tools_as_text(messages, tools)
        template_tools = None
    try:
        rendered = template.render(
            conversation,
            tools=template_tools,
            add_generation_prompt=add_generation_prompt,
            extra_context=template_switches,
        )
    except TemplateError as error:
        message = f"The chat template cannot render this conversation: {error}"
        raise ApiError(400, message, code="template_error") from None
    return ChatPrompt(
        token_ids=tuple(rendered.token_ids),
        text=rendered.text,
        tool_format=traits.tool_format,
        thinks=model_thinks(tokenizer),
        starts_in_reasoning=prompt_opens_reasoning(rendered.text),
    )


def _call_text(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {arguments}}}\n</tool_call>'


def _arguments_object(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _with_calls_as_template_sees_them(message: Message, tool_format: ToolCallFormat) -> Message:
    """Calls with object arguments stay calls (arguments as a dict); malformed ones become text."""
    calls = message.get("tool_calls") or []
    if not calls:
        return message
    kept, as_text = [], []
    for call in calls:
        function = call.get("function") or {}
        arguments = _arguments_object(function.get("arguments"))
        if arguments is None:
            as_text.append(_call_text(str(function.get("name", "")), str(function.get("arguments", ""))))
        else:
            kept.append({**call, "function": {**function, "arguments": arguments}})
    content = "\n".join([message.get("content") or "", *as_text]).strip()
    return {**message, "content": content, "tool_calls": kept} if kept else {**message, "content": content}


def _with_tools_as_text(messages: Sequence[Message], tools: Sequence[FunctionTool]) -> list[Message]:
    conversation: list[Message] = []
    for message in messages:
        if message["role"] == "tool":
            conversation.append(
                {"role": "user", "content": f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"}
            )
        elif message.get("tool_calls"):
            calls = [
                _call_text(str(function.get("name", "")), _arguments_text(function.get("arguments")))
                for function in (call.get("function") or {} for call in message["tool_calls"])
            ]
            content = "\n".join([message.get("content") or "", *calls]).strip()
            without_calls = {key: value for key, value in message.items() if key != "tool_calls"}
            conversation.append({**without_calls, "content": content})
        else:
            conversation.append(message)
    if not tools:
        return conversation
    section = TOOLS_SYSTEM_PROMPT.format(tools="\n".join(json.dumps(t.as_template_tool()) for t in tools))
    if conversation and conversation[0]["role"] == "system":
        first = conversation[0]
        return [{**first, "content": f"{first.get('content') or ''}\n\n{section}".lstrip()}, *conversation[1:]]
    return [{"role": "system", "content": section}, *conversation]


def _arguments_text(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw)
