"""Extract what OpenAI's official spec says of the Responses objects pooled answers with.

For each pair (pooled's schema, OpenAI's schema) it writes OpenAI's property names, its required
names, and the `type` constant, into `tests/goldens/openai_responses_schemas.json`; the spec test
checks pooled's spec against that file, so the tests need no file outside the repository.

    .venv/bin/python tools/openai_schema_golden.py ../shared/reference/openai-openapi.yaml
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "openai_responses_schemas.json"

PAIRS = {
    "ResponseObject": "Response",
    "ResponseUsage": "ResponseUsage",
    "ResponseErrorInfo": "ResponseError",
    "ResponseOutputMessage": "OutputMessage",
    "ResponseOutputText": "OutputTextContent",
    "ResponseOutputRefusal": "RefusalContent",
    "ResponseLogprob": "LogProb",
    "ResponseTopLogprob": "TopLogProb",
    "ResponseFunctionToolCall": "FunctionToolCall",
    "ResponseCustomToolCall": "CustomToolCall",
    "ResponseReasoningItem": "ReasoningItem",
    "ResponseSummaryText": "SummaryTextContent",
    "ResponseReasoningText": "ReasoningTextContent",
    "ResponseInputMessageItem": "InputMessageResource",
    "ResponseInputText": "InputTextContent",
    "ResponseInputImage": "InputImageContent",
    "ResponseInputFile": "InputFileContent",
    "ResponseFunctionCallOutputItem": "FunctionToolCallOutputResource",
    "ResponseCustomToolCallOutputItem": "CustomToolCallOutputResource",
    "ResponseInputItemList": "ResponseItemList",
    "ResponseCreatedEvent": "ResponseCreatedEvent",
    "ResponseInProgressEvent": "ResponseInProgressEvent",
    "ResponseCompletedEvent": "ResponseCompletedEvent",
    "ResponseIncompleteEvent": "ResponseIncompleteEvent",
    "ResponseFailedEvent": "ResponseFailedEvent",
    "ResponseOutputItemAddedEvent": "ResponseOutputItemAddedEvent",
    "ResponseOutputItemDoneEvent": "ResponseOutputItemDoneEvent",
    "ResponseContentPartAddedEvent": "ResponseContentPartAddedEvent",
    "ResponseContentPartDoneEvent": "ResponseContentPartDoneEvent",
    "ResponseOutputTextDeltaEvent": "ResponseTextDeltaEvent",
    "ResponseOutputTextDoneEvent": "ResponseTextDoneEvent",
    "ResponseRefusalDeltaEvent": "ResponseRefusalDeltaEvent",
    "ResponseRefusalDoneEvent": "ResponseRefusalDoneEvent",
    "ResponseFunctionCallArgumentsDeltaEvent": "ResponseFunctionCallArgumentsDeltaEvent",
    "ResponseFunctionCallArgumentsDoneEvent": "ResponseFunctionCallArgumentsDoneEvent",
    "ResponseCustomToolCallInputDeltaEvent": "ResponseCustomToolCallInputDeltaEvent",
    "ResponseCustomToolCallInputDoneEvent": "ResponseCustomToolCallInputDoneEvent",
    "ResponseReasoningTextDeltaEvent": "ResponseReasoningTextDeltaEvent",
    "ResponseReasoningTextDoneEvent": "ResponseReasoningTextDoneEvent",
    "ResponseReasoningSummaryPartAddedEvent": "ResponseReasoningSummaryPartAddedEvent",
    "ResponseReasoningSummaryPartDoneEvent": "ResponseReasoningSummaryPartDoneEvent",
    "ResponseReasoningSummaryTextDeltaEvent": "ResponseReasoningSummaryTextDeltaEvent",
    "ResponseReasoningSummaryTextDoneEvent": "ResponseReasoningSummaryTextDoneEvent",
    "ResponseErrorEvent": "ResponseErrorEvent",
}


def _flatten(schema: dict[str, Any], schemas: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """An object schema's properties and required names, through `$ref` and `allOf`."""
    if "$ref" in schema:
        return _flatten(schemas[schema["$ref"].rsplit("/", 1)[1]], schemas)
    objects = [part for part in schema.get("anyOf", []) if part.get("type") != "null"]
    if len(objects) == 1:  # `X or null`
        return _flatten(objects[0], schemas)
    properties: dict[str, Any] = dict(schema.get("properties", {}))
    required = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        more, more_required = _flatten(part, schemas)
        properties |= more
        required |= more_required
    return properties, required


def _type_const(prop: dict[str, Any]) -> str | None:
    if "const" in prop:
        return str(prop["const"])
    enum = prop.get("enum") or []
    return str(enum[0]) if len(enum) == 1 else None


def main(spec_path: str) -> None:
    schemas = yaml.safe_load(Path(spec_path).read_text())["components"]["schemas"]
    golden: dict[str, Any] = {}
    for ours, theirs in PAIRS.items():
        properties, required = _flatten(schemas[theirs], schemas)
        golden[ours] = {
            "openai": theirs,
            "properties": sorted(properties),
            "required": sorted(required),
            "type": _type_const(properties.get("type", {})),
        }
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
