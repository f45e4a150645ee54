"""A Chat Completions request → the shared layer's pieces: messages, tools, constraint, sampling."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.api import Constraint, GenerationRequest, Vision
from generated import models
from handlers.api_error import ApiError
from handlers.context import DEFAULT_LIMITS, GenerationLimits
from handlers.generation.constraints import ANY_JSON_OBJECT, constraint_factory, json_schema_grammar
from handlers.generation.images import IMAGE_PART, ImagePart, check_images_served, image_from_url, with_images
from handlers.generation.prompt import ChatPrompt, FunctionTool, Message, render_chat
from handlers.generation.sampling_params import openai_sampling_fields, sampling_params
from handlers.generation.stop_strings import stop_strings
from handlers.generation.tool_choice import ToolMode, ToolUse, tool_use
from handlers.openai_usage import StreamUsage
from text import ChatTemplate, Tokenizer

TEXT_PART_TYPES = ("text", "input_text", "output_text")


@dataclass(frozen=True)
class ChatPlan:
    """Everything the answer needs besides the engine's events."""

    generation: GenerationRequest
    prompt: ChatPrompt
    stops: tuple[str, ...]
    tools: ToolUse
    logprobs: bool
    stream_usage: StreamUsage


def plan_chat(
    body: models.ChatCompletionRequest,
    template: ChatTemplate | None,
    tokenizer: Tokenizer,
    adapter: str | None = None,
    vision: Vision | None = None,
    limits: GenerationLimits = DEFAULT_LIMITS,
) -> ChatPlan:
    """`vision`: how the served model takes images (None: it takes none); `limits`: how many a request
    may hold and whether their URLs are fetched."""
    stops = stop_strings(body.stop)
    tools = _tool_use(body)
    switches: dict[str, Any] = {"enable_thinking": False} if body.reasoning_effort == "none" else {}
    switches |= body.chat_template_kwargs or {}
    images: list[ImagePart] = []
    messages = chat_messages(body.messages, images)
    check_images_served(images, vision, limits.max_images)
    prompt = render_chat(template, tokenizer, messages, tools.offered, switches)
    prompt_ids, prepared = with_images(prompt.token_ids, images, vision, limits.image_fetch)
    logprobs = bool(body.logprobs)
    sampling = sampling_params(
        openai_sampling_fields(body, (body.top_logprobs or 0) if logprobs else None),
        tokenizer.vocab_size,
        limits.sampling,
    )
    requested = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    generation = GenerationRequest(
        prompt_ids=prompt_ids,
        sampling=sampling,
        max_tokens=requested,
        n=body.n or 1,
        constraint=tools.constraint(tokenizer, prompt.tool_format) or _response_format(body.response_format, tokenizer),
        adapter=adapter,
        prompt_logprobs=body.prompt_logprobs,
        images=prepared,
    )
    return ChatPlan(generation, prompt, stops, tools, logprobs, StreamUsage.asked(body.stream_options))


def chat_messages(messages: Sequence[models.ChatMessage], images: list[ImagePart]) -> list[Message]:
    """The neutral messages; each image part's bytes are appended to `images`, in order."""
    return [_message(message, index, images) for index, message in enumerate(messages)]


def _message(message: models.ChatMessage, index: int, images: list[ImagePart]) -> Message:
    role = {"developer": "system", "function": "tool"}.get(message.role, message.role)
    neutral: Message = {"role": role, "content": _content(message.content, index, images if role == "user" else None)}
    calls = [_call(call) for call in message.tool_calls or []]
    if message.function_call:  # the deprecated single call
        calls.append({"type": "function", "function": dict(message.function_call)})
    if calls:
        neutral["tool_calls"] = calls
    if message.tool_call_id:
        neutral["tool_call_id"] = message.tool_call_id
    if message.name and role == "tool":
        neutral["name"] = message.name
    reasoning = message.reasoning_content or message.reasoning
    if reasoning:
        neutral["reasoning_content"] = reasoning
    return neutral


def _content(
    content: str | list[models.ChatContentPart] | None, index: int, images: list[ImagePart] | None
) -> str | list[dict[str, Any]]:
    """The message's text; with images (a user message's: `images` is None for other roles), its
    parts as a chat template reads them (text and image)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[dict[str, Any]] = []
    for number, part in enumerate(content):
        if part.type in TEXT_PART_TYPES:
            parts.append({"type": "text", "text": part.text or ""})
        elif part.type == "refusal":
            parts.append({"type": "text", "text": part.refusal or ""})
        elif part.type == "image_url" and images is not None:
            url = (part.image_url or {}).get("url")
            param = f"messages.{index}.content.{number}.image_url"
            if not isinstance(url, str):
                raise ApiError(400, "An image_url part needs image_url.url.", code="invalid_image_url", param=param)
            images.append(image_from_url(url, param))
            parts.append(dict(IMAGE_PART))
        else:
            raise ApiError(
                400,
                f"Content parts of type '{part.type}' are not supported here: pooled takes text, and images "
                "in user messages.",
                code="unsupported_content",
                param=f"messages.{index}.content",
            )
    if any(part["type"] == "image" for part in parts):
        return parts
    return "".join(part["text"] for part in parts)


def _call(call: models.ChatMessageToolCallParam) -> dict[str, Any]:
    if call.function is not None:
        function = {"name": call.function.name or "", "arguments": call.function.arguments or "{}"}
    else:  # a custom tool's free-form input: kept as a call whose arguments are its text
        custom = call.custom or models.ChatCustomCallParam()
        function = {"name": custom.name or "", "arguments": custom.input or ""}
    return {"id": call.id or "", "type": "function", "function": function}


def function_tools(tools: Sequence[models.ChatTool], functions: Sequence[Mapping[str, Any]]) -> list[FunctionTool]:
    """Function tools (and the deprecated `functions`); other tool types are left out of the prompt."""
    offered = [
        FunctionTool(tool.function.name, tool.function.description, tool.function.parameters)
        for tool in tools
        if tool.type == "function" and tool.function is not None
    ]
    for function in functions:
        name = str(function.get("name", ""))
        offered.append(FunctionTool(name, function.get("description"), function.get("parameters")))
    return offered


def _tool_use(body: models.ChatCompletionRequest) -> ToolUse:
    tools = function_tools(body.tools or [], body.functions or [])
    parallel = body.parallel_tool_calls is not False
    choice: Any = body.tool_choice if body.tool_choice is not None else body.function_call
    if choice is None or isinstance(choice, str):
        mode: ToolMode = "auto" if choice in (None, "auto") else "none" if choice == "none" else "required"
        return tool_use(tools, mode, parallel)
    if isinstance(choice, dict):  # the deprecated `function_call: {"name": …}`
        return tool_use(tools, "required", parallel, named=str(choice.get("name")))
    if choice.type == "allowed_tools":
        allowed = choice.allowed_tools or {}
        names = {str((t.get("function") or t).get("name")) for t in allowed.get("tools", [])}
        mode = "required" if allowed.get("mode") == "required" else "auto"
        return tool_use([t for t in tools if t.name in names], mode, parallel)
    named = (choice.function or choice.custom or {}).get("name")
    return tool_use(tools, "required", parallel, named=str(named))


def _response_format(
    response_format: models.ChatResponseFormat | None, tokenizer: Tokenizer
) -> Callable[[], Constraint] | None:
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return constraint_factory(tokenizer, json_schema_grammar(ANY_JSON_OBJECT, "response_format"), "response_format")
    param = "response_format.json_schema.schema"
    schema = response_format.json_schema.schema_ if response_format.json_schema else None
    if schema is None:
        raise ApiError(400, f"'{param}' is required with type json_schema.", code="invalid_constraint", param=param)
    return constraint_factory(tokenizer, json_schema_grammar(schema, param), param)
