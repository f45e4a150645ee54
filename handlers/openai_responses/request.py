"""A Responses request → the shared layer's pieces: the conversation (earlier turns included), the
tools, the constraint and the sampling."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.api import Constraint, GenerationRequest, Vision
from engine.inputs import PreparedImage
from generated import models
from handlers.api_error import ApiError
from handlers.context import DEFAULT_LIMITS, GenerationLimits
from handlers.generation.constraints import ANY_JSON_OBJECT, constraint_factory, json_schema_grammar
from handlers.generation.images import ImagePart, check_images_served, with_images
from handlers.generation.prompt import ChatPrompt, render_chat
from handlers.generation.sampling_params import SamplingFields, sampling_params
from handlers.openai_responses.items import Item, conversation, input_items
from handlers.openai_responses.tools import ResponseTools, ToolPlan, response_tools, tool_plan
from handlers.response_store import ResponseStore
from text import ChatTemplate, Tokenizer

# `include` asks for output-text logprobs this way as well as by `top_logprobs`.
INCLUDE_LOGPROBS = "message.output_text.logprobs"

PromptBody = models.CreateResponseRequest | models.ResponseInputTokensRequest


@dataclass(frozen=True)
class RenderedInput:
    prompt: ChatPrompt
    items: list[Item]  # earlier turns and this input, in the stored shape: what is stored as input items
    tools: ResponseTools
    tool_plan: ToolPlan
    images: tuple[PreparedImage, ...]  # each standing in the prompt as its tokens


@dataclass(frozen=True)
class ResponsePlan:
    generation: GenerationRequest
    rendered: RenderedInput
    logprobs: bool


def render_input(
    body: PromptBody,
    template: ChatTemplate | None,
    tokenizer: Tokenizer,
    store: ResponseStore,
    vision: Vision | None = None,
    limits: GenerationLimits = DEFAULT_LIMITS,
) -> RenderedInput:
    """The prompt exactly as the model will see it (shared by generation and `input_tokens`)."""
    _refuse_unserved(body)
    items = [*_earlier_items(body.previous_response_id, store), *input_items(body.input)]
    tools = response_tools(body.tools or [])
    plan = tool_plan(tools, body.tool_choice, body.parallel_tool_calls is not False)
    effort = body.reasoning.effort if body.reasoning else None
    switches: dict[str, Any] = {"enable_thinking": False} if effort == "none" else {}
    images: list[ImagePart] = []
    messages = conversation(items, body.instructions, images)
    check_images_served(images, vision, limits.max_images)
    prompt = render_chat(template, tokenizer, messages, plan.use.offered, switches)
    token_ids, prepared = with_images(prompt.token_ids, images, vision, limits.image_fetch)
    return RenderedInput(replace(prompt, token_ids=token_ids), items, tools, plan, prepared)


def plan_response(
    body: models.CreateResponseRequest,
    template: ChatTemplate | None,
    tokenizer: Tokenizer,
    store: ResponseStore,
    adapter: str | None = None,
    vision: Vision | None = None,
    limits: GenerationLimits = DEFAULT_LIMITS,
) -> ResponsePlan:
    if body.background:
        raise ApiError(400, "Background responses are not served; leave 'background' unset.", param="background")
    rendered = render_input(body, template, tokenizer, store, vision, limits)
    if not rendered.items:
        raise ApiError(400, "Nothing to answer: send 'input' or 'previous_response_id'.", param="input")
    logprobs = body.top_logprobs is not None or INCLUDE_LOGPROBS in (body.include or [])
    sampling = sampling_params(
        SamplingFields(
            temperature=body.temperature,
            top_p=body.top_p,
            logprobs=(body.top_logprobs or 0) if logprobs else None,
            ignore_eos=body.ignore_eos,
        ),
        tokenizer.vocab_size,
        limits.sampling,
    )
    plan = rendered.tool_plan
    forced = plan.forced_custom
    constraint = (
        forced.input_constraint(tokenizer)
        if forced
        else plan.use.constraint(tokenizer, rendered.prompt.tool_format) or _text_format(body.text, tokenizer)
    )
    generation = GenerationRequest(
        rendered.prompt.token_ids,
        sampling,
        body.max_output_tokens,
        constraint=constraint,
        adapter=adapter,
        images=rendered.images,
    )
    return ResponsePlan(generation, rendered, logprobs)


def _refuse_unserved(body: PromptBody) -> None:
    if body.conversation is not None:
        raise ApiError(400, "Conversations are not served; use 'previous_response_id'.", param="conversation")
    if isinstance(body, models.CreateResponseRequest) and body.prompt is not None:
        raise ApiError(400, "Prompt templates are not served; send 'input'.", param="prompt")


def _earlier_items(previous_response_id: str | None, store: ResponseStore) -> Sequence[Item]:
    """A stored response's context: its own stored input items (which hold the turns before it) and its output."""
    if previous_response_id is None:
        return []
    entry = store.get(previous_response_id)
    if entry is None:
        raise ApiError(
            400,
            f"Previous response '{previous_response_id}' is not stored here: it was stored with store: false, "
            "by another server, or evicted (the store is bounded by count, bytes and idle time).",
            code="previous_response_not_found",
            param="previous_response_id",
        )
    return [*entry.input_items, *entry.response["output"]]


def _text_format(text: models.ResponseTextParam | None, tokenizer: Tokenizer) -> Callable[[], Constraint] | None:
    text_format = text.format if text else None
    if text_format is None or text_format.type == "text":
        return None
    if text_format.type == "json_object":
        return constraint_factory(tokenizer, json_schema_grammar(ANY_JSON_OBJECT, "text.format"), "text.format")
    param = "text.format.schema"
    if text_format.schema_ is None:
        raise ApiError(400, f"'{param}' is required with type json_schema.", code="invalid_constraint", param=param)
    return constraint_factory(tokenizer, json_schema_grammar(text_format.schema_, param), param)
