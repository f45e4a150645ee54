"""Responses items: the request's `input` → stored item shapes → the neutral chat messages.

Clients send items loosely (Codex's come with client-made ids, opencode's function calls with none,
messages with a string or a part list, the server's own output echoed back with ids that were never
stored). Each is first normalised to the strict shape `GET /v1/responses/{id}/input_items` answers
(an id on every item, messages with part lists, assistant messages as output messages); the prompt
is rendered from those, so the current input and the stored earlier turns take one path.

Items the model cannot use (`item_reference`, hosted tool calls such as `web_search_call`, …) are
dropped. A reasoning item becomes the `reasoning_content` of the assistant turn that follows it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from generated import models
from handlers.api_error import ApiError
from handlers.generation.images import IMAGE_PART, ImagePart, image_from_url
from handlers.generation.prompt import Message

Item = dict[str, Any]

ID_PREFIXES = {
    "message": "msg_",
    "function_call": "fc_",
    "function_call_output": "fco_",
    "custom_tool_call": "ctc_",
    "custom_tool_call_output": "ctco_",
    "reasoning": "rs_",
}


def new_item_id(item_type: str) -> str:
    return ID_PREFIXES[item_type] + secrets.token_hex(12)


def input_items(value: str | Sequence[models.ResponseInputItemParam] | None) -> list[Item]:
    if value is None:
        return []
    if isinstance(value, str):
        return [_message_item("user", value, None)]
    items = []
    for raw in value:
        item = _normalised(raw)
        if item is not None:
            items.append(item)
    return items


def _normalised(raw: models.ResponseInputItemParam) -> Item | None:
    kind = raw.type or "message"
    if kind == "message":
        return _message_item(raw.role or "user", raw.content, raw.id)
    if kind not in ID_PREFIXES:
        return None
    item_id = raw.id or new_item_id(kind)
    call_id = raw.call_id or raw.id or ""
    if kind == "function_call":
        item = {
            "id": item_id,
            "type": kind,
            "call_id": call_id,
            "name": raw.name or "",
            "arguments": raw.arguments or "{}",
        }
        if raw.namespace:
            item["namespace"] = raw.namespace
        return item | {"status": "completed"}
    if kind == "custom_tool_call":
        item = {"id": item_id, "type": kind, "call_id": call_id, "name": raw.name or "", "input": raw.input or ""}
        return item | ({"namespace": raw.namespace} if raw.namespace else {})
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = raw.output if isinstance(raw.output, str) else [_input_part(p) for p in raw.output or []]
        return {"id": item_id, "type": kind, "call_id": call_id, "output": output, "status": "completed"}
    content = raw.content if isinstance(raw.content, list) else []
    return {
        "id": item_id,
        "type": kind,
        "summary": [{"type": "summary_text", "text": p.text or ""} for p in raw.summary or []],
        "content": [{"type": "reasoning_text", "text": p.text or ""} for p in content],
        "encrypted_content": raw.encrypted_content,
    }


def _message_item(
    role: str, content: str | Sequence[models.ResponseInputContentParam] | None, item_id: str | None
) -> Item:
    parts: list[models.ResponseInputContentParam]
    if content is None or isinstance(content, str):
        parts = [models.ResponseInputContentParam(type="input_text", text=content or "")]
    else:
        parts = list(content)
    shaped = [_output_part(part) if role == "assistant" else _input_part(part) for part in parts]
    return {
        "id": item_id or new_item_id("message"),
        "type": "message",
        "role": role,
        "status": "completed",
        "content": shaped,
    }


def _output_part(part: models.ResponseInputContentParam) -> Item:
    if part.type == "refusal":
        return {"type": "refusal", "refusal": part.refusal or part.text or ""}
    return {"type": "output_text", "text": part.text or "", "annotations": [], "logprobs": []}


def _input_part(part: models.ResponseInputContentParam) -> Item:
    if part.type == "input_image":
        return {
            "type": "input_image",
            "image_url": part.image_url,
            "file_id": part.file_id,
            "detail": part.detail or "auto",
        }
    if part.type == "input_file":
        fields = part.model_dump(include={"file_id", "file_data", "file_url", "filename"}, exclude_none=True)
        return {"type": "input_file", **fields}
    return {"type": "input_text", "text": part.text if part.text is not None else part.refusal or ""}


def conversation(items: Sequence[Item], instructions: str | None, images: list[ImagePart]) -> list[Message]:
    """Stored-shape items (and the request's instructions first) → the neutral messages of the
    prompt; each `input_image`'s bytes are appended to `images`, in order."""
    messages: list[Message] = [{"role": "system", "content": instructions}] if instructions else []
    reasoning = ""
    for index, item in enumerate(items):
        kind = item["type"]
        if kind == "reasoning":
            reasoning += _reasoning_text(item)
        elif kind == "message" and item["role"] != "assistant":
            role = "user" if item["role"] == "user" else "system"
            messages.append({"role": role, "content": _input_content(item["content"], index, images)})
        elif kind == "message":
            text = "".join(part.get("text") or part.get("refusal") or "" for part in item["content"])
            messages.append(_with_reasoning({"role": "assistant", "content": text}, reasoning))
            reasoning = ""
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item["arguments"] if kind == "function_call" else {"input": item["input"]}
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": arguments},
            }
            if not messages or messages[-1]["role"] != "assistant":  # calls after a text answer join its turn
                messages.append({"role": "assistant", "content": ""})
            turn = _with_reasoning(messages[-1], reasoning)
            turn["tool_calls"] = [*turn.get("tool_calls", []), call]
            reasoning = ""
        else:  # a tool's output
            output = item["output"]
            text = output if isinstance(output, str) else _input_text(output, index)
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
    return messages


def _with_reasoning(turn: Message, reasoning: str) -> Message:
    if reasoning:
        turn["reasoning_content"] = turn.get("reasoning_content", "") + reasoning
    return turn


def _reasoning_text(item: Item) -> str:
    parts = item.get("content") or item.get("summary") or []
    return "".join(part.get("text", "") for part in parts)


def _input_text(parts: Sequence[Item], index: int) -> str:
    content = _input_content(parts, index, [])
    if not isinstance(content, str):
        raise ApiError(400, "A tool's output takes text only.", code="unsupported_content", param=f"input.{index}")
    return content


def _input_content(parts: Sequence[Item], index: int, images: list[ImagePart]) -> str | list[dict[str, Any]]:
    """A message's text; with images, its parts as a chat template reads them (text and image)."""
    content: list[dict[str, Any]] = []
    for number, part in enumerate(parts):
        if part["type"] == "input_text":
            content.append({"type": "text", "text": part["text"]})
        elif part["type"] == "input_image" and isinstance(part.get("image_url"), str):
            images.append(image_from_url(part["image_url"], f"input.{index}.content.{number}.image_url"))
            content.append(dict(IMAGE_PART))
        else:
            what = "an input_image by file_id" if part["type"] == "input_image" else f"'{part['type']}'"
            raise ApiError(
                400,
                f"Content parts of type {what} are not supported: pooled takes text and inline images.",
                code="unsupported_content",
                param=f"input.{index}.content",
            )
    if any(part["type"] == "image" for part in content):
        return content
    return "".join(part["text"] for part in content)
