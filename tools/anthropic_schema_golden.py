"""Extract what Anthropic's published types say of the objects pooled answers with on `/v1/messages`.

Anthropic publishes no OpenAPI document; its SDK's pydantic types (`anthropic.types`, a dev
dependency) are the published shapes. For each pair (pooled's schema, the SDK's type, or
`Type.property` for a type the SDK nests) this writes the same facts as
tools/openai_schema_golden.py: property names, required names, the names that may be null and the
`type` constant, into `tests/goldens/anthropic_schemas.json`, which the spec test reads.

    .venv/bin/python tools/anthropic_schema_golden.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import anthropic.types
import anthropic.types.shared
from openai_schema_golden import facts

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "anthropic_schemas.json"

PAIRS = {
    "AnthropicMessage": "Message",
    "AnthropicUsage": "Usage",
    "AnthropicTextBlock": "TextBlock",
    "AnthropicThinkingBlock": "ThinkingBlock",
    "AnthropicRedactedThinkingBlock": "RedactedThinkingBlock",
    "AnthropicToolUseBlock": "ToolUseBlock",
    "AnthropicMessageStartEvent": "RawMessageStartEvent",
    "AnthropicMessageDeltaEvent": "RawMessageDeltaEvent",
    "AnthropicMessageDelta": "RawMessageDeltaEvent.delta",
    "AnthropicMessageDeltaUsage": "MessageDeltaUsage",
    "AnthropicMessageStopEvent": "RawMessageStopEvent",
    "AnthropicContentBlockStartEvent": "RawContentBlockStartEvent",
    "AnthropicContentBlockDeltaEvent": "RawContentBlockDeltaEvent",
    "AnthropicContentBlockStopEvent": "RawContentBlockStopEvent",
    "AnthropicTextDelta": "TextDelta",
    "AnthropicInputJsonDelta": "InputJSONDelta",
    "AnthropicThinkingDelta": "ThinkingDelta",
    "AnthropicSignatureDelta": "SignatureDelta",
    "AnthropicCountTokensResponse": "MessageTokensCount",
    "AnthropicModelInfo": "ModelInfo",
    "AnthropicErrorResponse": "ErrorResponse",
}


def _schemas(type_name: str) -> dict[str, Any]:
    """The SDK type's JSON schema under its name, with every schema it refers to."""
    model = getattr(anthropic.types, type_name, None) or getattr(anthropic.types.shared, type_name)
    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    return {**schema.pop("$defs", {}), type_name: schema}


def main() -> None:
    golden = {
        ours: {
            "official": f"anthropic {anthropic.__version__} {theirs}",
            **facts(theirs, _schemas(theirs.split(".")[0])),
        }
        for ours, theirs in PAIRS.items()
    }
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main()
