"""Text pieces → Anthropic content blocks, as the block events a stream sends.

Reasoning goes into a `thinking` block, answer text into a `text` block, each call into its own
`tool_use` block (its input in `input_json_delta`s as the model writes it); a new kind of piece
closes the open block. A `thinking` block ends with a `signature_delta`. The non-streamed answer's `content` is
built from the very same events, so a stream and a plain answer are equal by construction.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from generated import models
from handlers.generation.text_output import Piece
from handlers.generation.tool_calls import CallFragment

# pooled signs nothing: a client sends this (or an empty signature) back and it is accepted as is.
THINKING_SIGNATURE = "pooled-unsigned"

Block = models.AnthropicTextBlock | models.AnthropicToolUseBlock | models.AnthropicThinkingBlock
BlockEvent = (
    models.AnthropicContentBlockStartEvent
    | models.AnthropicContentBlockDeltaEvent
    | models.AnthropicContentBlockStopEvent
)
Delta = (
    models.AnthropicTextDelta
    | models.AnthropicInputJsonDelta
    | models.AnthropicThinkingDelta
    | models.AnthropicSignatureDelta
)


def tool_use_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class ContentBlocks:
    """Feed pieces with `add`, then `close` once; `blocks` is the answer's content so far."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._open: Literal["text", "thinking"] | None = None
        self._tool_json = ""  # the open tool_use block's input so far

    def add(self, piece: Piece) -> list[BlockEvent]:
        events: list[BlockEvent] = []
        if piece.reasoning:
            events += self._write("thinking", piece.reasoning)
        if piece.content:
            events += self._write("text", piece.content)
        for fragment in piece.call_fragments:
            events += self._call_fragment(fragment)
        return events

    def _call_fragment(self, fragment: CallFragment) -> list[BlockEvent]:
        """A call's `tool_use` block opens with its first fragment, takes each fragment's arguments
        as an `input_json_delta` and stops with its last; the block's `input` is the whole JSON
        (an empty object where a streamed call's arguments never completed)."""
        events: list[BlockEvent] = []
        if fragment.opens:
            events += self._close()
            block_id = tool_use_id(fragment.id)
            events += self._start(
                models.AnthropicToolUseBlock(type="tool_use", id=block_id, name=fragment.name, input={})
            )
            self._tool_json = ""
        if fragment.arguments:
            self._tool_json += fragment.arguments
            events.append(
                self._delta(models.AnthropicInputJsonDelta(type="input_json_delta", partial_json=fragment.arguments))
            )
        if fragment.closes:
            block = self.blocks[-1]
            assert isinstance(block, models.AnthropicToolUseBlock)
            block.input = _json_object(self._tool_json)
            events += self._stop()
        return events

    def close(self) -> list[BlockEvent]:
        """Close the open block; an answer with no block at all gets one empty text block."""
        if not self.blocks:
            return self._start(models.AnthropicTextBlock(type="text", text="")) + self._stop()
        return self._close()

    def _write(self, kind: Literal["text", "thinking"], text: str) -> list[BlockEvent]:
        events: list[BlockEvent] = []
        if self._open != kind:
            events += self._close()
            block: Block = (
                models.AnthropicTextBlock(type="text", text="")
                if kind == "text"
                else models.AnthropicThinkingBlock(type="thinking", thinking="", signature="")
            )
            events += self._start(block)
            self._open = kind
        delta: Delta = (
            models.AnthropicTextDelta(type="text_delta", text=text)
            if kind == "text"
            else models.AnthropicThinkingDelta(type="thinking_delta", thinking=text)
        )
        events.append(self._delta(delta))
        return events

    def _close(self) -> list[BlockEvent]:
        if self._open is None:
            return []
        events: list[BlockEvent] = []
        if self._open == "thinking":
            events.append(
                self._delta(models.AnthropicSignatureDelta(type="signature_delta", signature=THINKING_SIGNATURE))
            )
        self._open = None
        return events + self._stop()

    def _start(self, block: Block) -> list[BlockEvent]:
        self.blocks.append(block.model_copy(deep=True))
        return [
            models.AnthropicContentBlockStartEvent(
                type="content_block_start", index=len(self.blocks) - 1, content_block=block
            )
        ]

    def _stop(self) -> list[BlockEvent]:
        return [models.AnthropicContentBlockStopEvent(type="content_block_stop", index=len(self.blocks) - 1)]

    def _delta(self, delta: Delta) -> models.AnthropicContentBlockDeltaEvent:
        block = self.blocks[-1]
        if isinstance(delta, models.AnthropicTextDelta) and isinstance(block, models.AnthropicTextBlock):
            block.text += delta.text
        elif isinstance(delta, models.AnthropicThinkingDelta) and isinstance(block, models.AnthropicThinkingBlock):
            block.thinking += delta.thinking
        elif isinstance(delta, models.AnthropicSignatureDelta) and isinstance(block, models.AnthropicThinkingBlock):
            block.signature += delta.signature
        return models.AnthropicContentBlockDeltaEvent(
            type="content_block_delta", index=len(self.blocks) - 1, delta=delta
        )
