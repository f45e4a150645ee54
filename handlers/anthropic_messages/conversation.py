"""An Anthropic conversation (`system` + `messages` with content blocks) → the shared layer's neutral messages.

- `system` (a string or text blocks) and any `role: "system"` messages before the first turn become
  the one leading system message; volatile lines are dropped from every system text.
- A `role: "system"` message later in the conversation (Claude Code's mid-conversation system
  messages, possibly the last one) stays a system message where the chat template renders one
  there; otherwise it is sent as a user message, so the template never refuses the conversation.
- User blocks: `text` (and a text `document`) are text; `tool_result`s become tool messages (before
  the message's text, as Anthropic orders them), an error result prefixed `Error:`; an `image`
  (base64; a URL source is a 400) stands where it was among the message's text, for a model that
  takes images (handlers/generation/images.py).
- Assistant blocks: `text`, `tool_use` (a call whose arguments are its `input`) and `thinking`
  (the reasoning, which templates that keep it render); `redacted_thinking` has nothing to render.
- `cache_control` is ignored everywhere: the engine's prefix cache needs no hints.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from generated import models
from handlers.api_error import ApiError
from handlers.generation.images import IMAGE_PART, ImagePart, image_from_base64, image_from_url
from handlers.generation.prompt import Message
from handlers.generation.volatile_lines import without_volatile_lines
from text import ChatTemplate, TemplateError

SystemParam = str | list[models.AnthropicTextBlockParam] | None

_PROBE_SYSTEM_TEXT = "pooled-probe-system-7d2e"


@dataclass(frozen=True)
class Conversation:
    messages: list[Message]
    # The text of a last assistant message, which the answer continues (Anthropic's "prefill").
    assistant_prefix: str | None
    images: list[ImagePart]  # the user messages' images, in order


def conversation(
    system: SystemParam,
    messages: Sequence[models.AnthropicMessageParam],
    template: ChatTemplate | None,
    volatile: re.Pattern[str],
) -> Conversation:
    leading = [_system_text(system, volatile)]
    turns: list[Message] = []
    images: list[ImagePart] = []
    for index, message in enumerate(messages):
        if message.role == "system":
            text = without_volatile_lines(_text_of(message.content, f"messages.{index}.content"), volatile)
            if turns:
                turns.append({"role": "system", "content": text})
            else:
                leading.append(text)
        elif message.role == "user":
            turns += _user_messages(message.content, index, images)
        else:
            turns.append(_assistant_message(message.content, index))
    prefix = _assistant_prefix(messages[-1]) if messages else None
    if prefix is not None:
        turns.pop()
    if template is not None and not _renders_later_system(template):
        turns = [{**m, "role": "user"} if m["role"] == "system" else m for m in turns]
    system_text = "\n\n".join(text for text in leading if text)
    head: list[Message] = [{"role": "system", "content": system_text}] if system_text else []
    return Conversation(head + turns, prefix, images)


def _system_text(system: SystemParam, volatile: re.Pattern[str]) -> str:
    if system is None:
        return ""
    texts = [system] if isinstance(system, str) else [block.text for block in system]
    return "\n\n".join(kept for text in texts if (kept := without_volatile_lines(text, volatile)))


def _text_of(content: str | list[models.AnthropicContentBlockParam], param: str) -> str:
    if isinstance(content, str):
        return content
    return "".join(_block_text(block, f"{param}.{position}") for position, block in enumerate(content))


def _block_text(block: models.AnthropicContentBlockParam | models.AnthropicToolResultContentParam, param: str) -> str:
    """A block read as text: text and text documents; an image is refused; other kinds carry no text."""
    if block.type == "image" or (block.type == "document" and (block.source or {}).get("type") != "text"):
        raise ApiError(
            400,
            f"Content blocks of type '{block.type}' are not supported: the served model takes text only.",
            code="unsupported_content",
            param=param,
        )
    if block.type == "document":
        return str((block.source or {}).get("data", ""))
    return block.text or ""


def _user_messages(
    content: str | list[models.AnthropicContentBlockParam], index: int, images: list[ImagePart]
) -> list[Message]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[Message] = []
    parts: list[dict[str, str]] = []
    for position, block in enumerate(content):
        param = f"messages.{index}.content.{position}"
        if block.type == "tool_result":
            results.append(
                {"role": "tool", "tool_call_id": block.tool_use_id or "", "content": _tool_result_text(block, param)}
            )
        elif block.type == "image":
            images.append(_image(block, param))
            parts.append(dict(IMAGE_PART))
        else:
            parts.append({"type": "text", "text": _block_text(block, param)})
    if any(part["type"] == "image" for part in parts):
        return [*results, {"role": "user", "content": parts}]
    text = "".join(part["text"] for part in parts)
    return results + ([{"role": "user", "content": text}] if text or not results else [])


def _image(block: models.AnthropicContentBlockParam, param: str) -> ImagePart:
    source = block.source or {}
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return image_from_base64(source["data"], f"{param}.source.data")
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return image_from_url(source["url"], f"{param}.source.url")
    raise ApiError(400, "An image block needs a base64 source (type, media_type, data).", "invalid_image", param)


def _tool_result_text(block: models.AnthropicContentBlockParam, param: str) -> str:
    content = block.content
    if isinstance(content, list):
        text = "".join(_block_text(part, f"{param}.content.{n}") for n, part in enumerate(content))
    else:
        text = content or ""
    return f"Error: {text}" if block.is_error else text


def _assistant_message(content: str | list[models.AnthropicContentBlockParam], index: int) -> Message:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, object]] = []
    for position, block in enumerate(content):
        if block.type == "tool_use":
            arguments = block.input if isinstance(block.input, dict) else json.dumps(block.input)
            calls.append(
                {
                    "id": block.id or "",
                    "type": "function",
                    "function": {"name": block.name or "", "arguments": arguments},
                }
            )
        elif block.type == "thinking":
            reasoning.append(block.thinking or "")
        elif block.type != "redacted_thinking":
            texts.append(_block_text(block, f"messages.{index}.content.{position}"))
    message: Message = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    return message


def _assistant_prefix(last: models.AnthropicMessageParam) -> str | None:
    """The text a last assistant message (without tool calls) starts the answer with."""
    if last.role != "assistant":
        return None
    if isinstance(last.content, str):
        return last.content
    if any(block.type == "tool_use" for block in last.content):
        return None
    return "".join(block.text or "" for block in last.content if block.type == "text")


@functools.lru_cache(maxsize=4)
def _renders_later_system(template: ChatTemplate) -> bool:
    """Whether the template renders a system message after the first turn (Qwen's, for one, refuses)."""
    probe = [{"role": "user", "content": "x"}, {"role": "system", "content": _PROBE_SYSTEM_TEXT}]
    try:
        return _PROBE_SYSTEM_TEXT in template.render(probe).text
    except TemplateError:
        return False
