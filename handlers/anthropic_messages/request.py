"""A Messages request → the shared layer's pieces: prompt, tools, thinking, sampling, the engine request.

`count_tokens` renders through the very same `messages_prompt`, so its count is the prompt the
engine would be given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from engine.api import GenerationRequest, Vision
from engine.inputs import PreparedImage
from generated import models
from handlers.anthropic_messages.conversation import conversation
from handlers.api_error import ApiError
from handlers.context import DEFAULT_LIMITS, GenerationLimits
from handlers.generation.images import check_images_served, with_images
from handlers.generation.prompt import ChatPrompt, FunctionTool, render_chat
from handlers.generation.reasoning_budget import with_reasoning_budget
from handlers.generation.sampling_params import SamplingFields, sampling_params
from handlers.generation.stop_strings import stop_strings
from handlers.generation.tool_choice import ToolMode, ToolUse, tool_use
from text import ChatTemplate, Tokenizer

PromptBody = models.AnthropicMessagesRequest | models.AnthropicCountTokensRequest

TOOL_CHOICE_MODES: dict[str, ToolMode] = {"auto": "auto", "any": "required", "tool": "required", "none": "none"}


@dataclass(frozen=True)
class MessagesPlan:
    """Everything the answer needs besides the engine's events."""

    generation: GenerationRequest
    prompt: ChatPrompt
    stops: tuple[str, ...]
    tools: ToolUse


def messages_prompt(
    body: PromptBody,
    template: ChatTemplate | None,
    tokenizer: Tokenizer,
    volatile: re.Pattern[str],
    vision: Vision | None = None,
    limits: GenerationLimits = DEFAULT_LIMITS,
) -> tuple[ChatPrompt, ToolUse, tuple[PreparedImage, ...]]:
    """The prompt (each image's tokens in it), the tools and the images, prepared for the model."""
    tools = _tool_use(body)
    dialogue = conversation(body.system, body.messages, template, volatile)
    check_images_served(dialogue.images, vision, limits.max_images)
    prompt = render_chat(template, tokenizer, dialogue.messages, tools.offered, _thinking_switches(body.thinking))
    token_ids, images = with_images(prompt.token_ids, dialogue.images, vision, limits.image_fetch)
    prompt = replace(prompt, token_ids=token_ids)
    if dialogue.assistant_prefix:
        prefix_ids = tokenizer.encode(dialogue.assistant_prefix)
        prompt = replace(
            prompt, token_ids=prompt.token_ids + tuple(prefix_ids), text=prompt.text + dialogue.assistant_prefix
        )
    return prompt, tools, images


def plan_message(
    body: models.AnthropicMessagesRequest,
    template: ChatTemplate | None,
    tokenizer: Tokenizer,
    volatile: re.Pattern[str],
    adapter: str | None = None,
    vision: Vision | None = None,
    limits: GenerationLimits = DEFAULT_LIMITS,
) -> MessagesPlan:
    stops = stop_strings(body.stop_sequences, "stop_sequences")
    prompt, tools, images = messages_prompt(body, template, tokenizer, volatile, vision, limits)
    sampling = sampling_params(
        SamplingFields(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, ignore_eos=body.ignore_eos),
        tokenizer.vocab_size,
        limits.sampling,
    )
    generation = GenerationRequest(
        prompt_ids=prompt.token_ids,
        sampling=sampling,
        # Clamped by the engine, never refused: Claude Code asks for 32000-64000, far past a small model's context.
        max_tokens=body.max_tokens,
        constraint=with_reasoning_budget(
            tools.constraint(tokenizer, prompt.tool_format), _thinking_budget(body.thinking), tokenizer, prompt
        ),
        adapter=adapter,
        images=images,
    )
    return MessagesPlan(generation, prompt, stops, tools)


def _thinking_budget(thinking: models.AnthropicThinkingParam | None) -> int | None:
    return thinking.budget_tokens if thinking is not None and thinking.type == "enabled" else None


def _thinking_switches(thinking: models.AnthropicThinkingParam | None) -> dict[str, Any]:
    """`enabled`/`disabled` set the template's `enable_thinking`; `adaptive` leaves the template's default."""
    if thinking is None or thinking.type == "adaptive":
        return {}
    return {"enable_thinking": thinking.type == "enabled"}


def _function_tools(tools: list[models.AnthropicToolParam]) -> list[FunctionTool]:
    """Client tools; a server tool (web search, code execution, …) needs Anthropic's servers: a 400 naming it."""
    server_tools = [f"'{tool.name}' ({tool.type})" for tool in tools if tool.type not in (None, "custom")]
    if server_tools:
        raise ApiError(
            400,
            f"Server tools run on Anthropic's servers and pooled cannot run them: {', '.join(server_tools)}. "
            "Offer a client tool (name, description, input_schema) instead.",
            code="unsupported_tool",
            param="tools",
        )
    return [FunctionTool(tool.name, tool.description, tool.input_schema) for tool in tools]


def _tool_use(body: PromptBody) -> ToolUse:
    tools = _function_tools(body.tools or [])
    choice = body.tool_choice
    if choice is None:
        return tool_use(tools, "auto", parallel=True)
    if choice.type == "tool" and not choice.name:
        raise ApiError(400, "tool_choice of type 'tool' needs the tool's 'name'.", param="tool_choice.name")
    named = choice.name if choice.type == "tool" else None
    return tool_use(tools, TOOL_CHOICE_MODES[choice.type], not choice.disable_parallel_tool_use, named)
