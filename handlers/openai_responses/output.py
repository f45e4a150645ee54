"""One answer's text pieces → Responses output items, and the stream events that build them.

The same builder serves both paths: a stream sends its events, a plain answer keeps only the
finished items, so both carry the same output by construction. Items open and close in the order
the model writes: a reasoning item, then a message (or, when `tool_choice` forces a custom tool, a
custom tool call whose input is the answer), then one item per tool call, its arguments streamed
as the model writes them; text after a call opens a new message. Events carry no
`sequence_number` here; the stream numbers them as it sends them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.api import TokenLogprob
from handlers.generation.text_output import Piece
from handlers.generation.tool_calls import CallFragment, ToolCall, new_call_id
from handlers.openai_responses.items import Item, new_item_id
from handlers.openai_responses.tools import CustomTool, ResponseTools, custom_call_item

Event = dict[str, Any]
ItemStatus = Literal["completed", "incomplete"]
LogprobShaper = Callable[[Sequence[TokenLogprob]], list[dict[str, Any]]]


@dataclass
class _OpenItem:
    kind: Literal["reasoning", "message", "custom"]
    item: Item
    output_index: int
    text: str = ""
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class OutputBuilder:
    def __init__(
        self, tools: ResponseTools, forced_custom: CustomTool | None, shape_logprobs: LogprobShaper | None
    ) -> None:
        self._tools = tools
        self._forced_custom = forced_custom
        self._shape_logprobs = shape_logprobs
        self._open: _OpenItem | None = None
        self._pending_logprobs: list[dict[str, Any]] = []
        self._call_index = 0  # the output index of the function call whose fragments arrive
        self._custom_arguments = ""  # a custom tool's call's arguments so far
        self.items: list[Item] = []

    def add(self, piece: Piece) -> list[Event]:
        events: list[Event] = []
        if self._shape_logprobs is not None and piece.logprobs:
            self._pending_logprobs += self._shape_logprobs(piece.logprobs)
        if piece.reasoning:
            events += self._write("reasoning", piece.reasoning)
        if piece.content:
            events += self._write("custom" if self._forced_custom else "message", piece.content)
        for fragment in piece.call_fragments:
            events += self._fragment(fragment)
        return events

    def finish(self, status: ItemStatus) -> list[Event]:
        """Close the open item; an answer with no items at all gets an empty message (or custom call)."""
        if self._open is None and not self.items:
            return [*self._write("custom" if self._forced_custom else "message", ""), *self._close(status)]
        return self._close(status)

    def _write(self, kind: Literal["reasoning", "message", "custom"], text: str) -> list[Event]:
        events: list[Event] = []
        if self._open is None or self._open.kind != kind:
            events += self._close("completed")
            events += self._start(kind)
        assert self._open is not None
        self._open.text += text
        if text:
            events.append(self._delta(self._open, text))
        return events

    def _start(self, kind: Literal["reasoning", "message", "custom"]) -> list[Event]:
        index = len(self.items)
        if kind == "custom":
            assert self._forced_custom is not None
            item = custom_call_item(new_item_id("custom_tool_call"), new_call_id(), self._forced_custom.name, "")
            self._open = _OpenItem(kind, item, index)
            return [_item_event("response.output_item.added", index, item)]
        if kind == "message":
            item = {
                "id": new_item_id("message"),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
        else:
            item = {
                "id": new_item_id("reasoning"),
                "type": "reasoning",
                "summary": [],
                "content": [],
                "encrypted_content": None,
                "status": "in_progress",
            }
        self._open = _OpenItem(kind, item, index)
        return [
            _item_event("response.output_item.added", index, item),
            _part_event("response.content_part.added", self._open, _part(kind, "", [])),
        ]

    def _delta(self, open_item: _OpenItem, text: str) -> Event:
        where = {"item_id": open_item.item["id"], "output_index": open_item.output_index}
        if open_item.kind == "custom":
            return {"type": "response.custom_tool_call_input.delta", **where, "delta": text}
        if open_item.kind == "reasoning":
            return {"type": "response.reasoning_text.delta", **where, "content_index": 0, "delta": text}
        logprobs, self._pending_logprobs = self._pending_logprobs, []
        open_item.logprobs += logprobs
        return {"type": "response.output_text.delta", **where, "content_index": 0, "delta": text, "logprobs": logprobs}

    def _close(self, status: ItemStatus) -> list[Event]:
        open_item, self._open = self._open, None
        if open_item is None:
            return []
        where = {"item_id": open_item.item["id"], "output_index": open_item.output_index}
        item = open_item.item
        if open_item.kind == "custom":
            item["input"] = open_item.text
            self.items.append(item)
            return [
                {"type": "response.custom_tool_call_input.done", **where, "input": open_item.text},
                _item_event("response.output_item.done", open_item.output_index, item),
            ]
        open_item.logprobs += self._pending_logprobs
        self._pending_logprobs = []
        part = _part(open_item.kind, open_item.text, open_item.logprobs)
        if open_item.kind == "message":
            done = {
                "type": "response.output_text.done",
                **where,
                "content_index": 0,
                "text": open_item.text,
                "logprobs": open_item.logprobs,
            }
        else:
            done = {"type": "response.reasoning_text.done", **where, "content_index": 0, "text": open_item.text}
        item.update(content=[part], status=status if open_item.kind == "message" else "completed")
        self.items.append(item)
        return [
            done,
            _part_event("response.content_part.done", open_item, part),
            _item_event("response.output_item.done", open_item.output_index, item),
        ]

    def _fragment(self, fragment: CallFragment) -> list[Event]:
        """A function call's item opens with its first fragment and takes each fragment's arguments
        as a delta; a custom tool's call (its input is a field of the arguments) waits to be whole."""
        if fragment.name in self._tools.custom:
            self._custom_arguments += fragment.arguments
            if not fragment.closes:
                return []
            arguments, self._custom_arguments = self._custom_arguments, ""
            return self._custom_call(ToolCall(fragment.index, fragment.id, fragment.name, arguments))
        events: list[Event] = []
        if fragment.opens:
            events += self._close("completed")
            item = self._tools.call_item(ToolCall(fragment.index, fragment.id, fragment.name, ""))
            item["status"] = "in_progress"
            self._call_index = len(self.items)
            self.items.append(item)
            events.append(_item_event("response.output_item.added", self._call_index, item))
        item = self.items[self._call_index]
        where = {"item_id": item["id"], "output_index": self._call_index}
        if fragment.arguments:
            item["arguments"] += fragment.arguments
            events.append({"type": "response.function_call_arguments.delta", **where, "delta": fragment.arguments})
        if fragment.closes:
            item["status"] = "completed"
            done = {"name": item["name"], "arguments": item["arguments"]}
            events.append({"type": "response.function_call_arguments.done", **where, **done})
            events.append(_item_event("response.output_item.done", self._call_index, item))
        return events

    def _custom_call(self, call: ToolCall) -> list[Event]:
        events = self._close("completed")
        index = len(self.items)
        item = self._tools.call_item(call)
        self.items.append(item)
        where = {"item_id": item["id"], "output_index": index}
        return [
            *events,
            _item_event("response.output_item.added", index, {**item, "input": ""}),
            {"type": "response.custom_tool_call_input.delta", **where, "delta": item["input"]},
            {"type": "response.custom_tool_call_input.done", **where, "input": item["input"]},
            _item_event("response.output_item.done", index, item),
        ]


def _part(kind: str, text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
    if kind == "reasoning":
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def _item_event(kind: str, index: int, item: Item) -> Event:
    return {"type": kind, "output_index": index, "item": dict(item)}


def _part_event(kind: str, open_item: _OpenItem, part: dict[str, Any]) -> Event:
    return {
        "type": kind,
        "item_id": open_item.item["id"],
        "output_index": open_item.output_index,
        "content_index": 0,
        "part": part,
    }
