"""Extract what OpenAI's official spec says of the objects pooled answers with
(tools/anthropic_schema_golden.py does the same for Anthropic's).

For each pair (pooled's schema, OpenAI's schema) it writes OpenAI's property names, its required
names, the names that may be null, and the `type` constant, into `tests/goldens/openai_schemas.json`;
the spec test checks pooled's spec against that file, so the tests need no file outside the
repository. OpenAI's side may name an array's items as `Schema.property[]` (a choice object that
the official spec writes inline).

    .venv/bin/python tools/openai_schema_golden.py ../shared/reference/openai-openapi.yaml
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "openai_schemas.json"

PAIRS = {
    "ChatCompletion": "CreateChatCompletionResponse",
    "ChatCompletionChoice": "CreateChatCompletionResponse.choices[]",
    "ChatCompletionMessage": "ChatCompletionResponseMessage",
    "ChatCompletionFunctionToolCall": "ChatCompletionMessageToolCall",
    "ChatCompletionCustomToolCall": "ChatCompletionMessageCustomToolCall",
    "ChatChoiceLogprobs": "CreateChatCompletionResponse.choices[].logprobs",
    "ChatTokenLogprob": "ChatCompletionTokenLogprob",
    "ChatCompletionChunk": "CreateChatCompletionStreamResponse",
    "ChatCompletionChunkChoice": "CreateChatCompletionStreamResponse.choices[]",
    "ChatCompletionChunkDelta": "ChatCompletionStreamResponseDelta",
    "ChatCompletionChunkToolCall": "ChatCompletionMessageToolCallChunk",
    "CompletionUsage": "CompletionUsage",
    "Completion": "CreateCompletionResponse",
    "CompletionChoice": "CreateCompletionResponse.choices[]",
    "OpenAIModel": "Model",
    "OpenAIModelList": "ListModelsResponse",
    "OpenAIError": "Error",
    "OpenAIErrorResponse": "ErrorResponse",
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
    "Transcription": "CreateTranscriptionResponseJson",
    "TranscriptionLogprob": "CreateTranscriptionResponseJson.logprobs[]",
    "TranscriptionTokenUsage": "TranscriptTextUsageTokens",
    "TranscriptionDurationUsage": "TranscriptTextUsageDuration",
    "TranscriptionVerbose": "CreateTranscriptionResponseVerboseJson",
    "TranscriptionSegment": "TranscriptionSegment",
    "TranscriptionWord": "TranscriptionWord",
    "Translation": "CreateTranslationResponseJson",
    "TranslationVerbose": "CreateTranslationResponseVerboseJson",
    "TranscriptTextDeltaEvent": "TranscriptTextDeltaEvent",
    "TranscriptTextDoneEvent": "TranscriptTextDoneEvent",
}


def _resolve(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _flatten(schema: dict[str, Any], schemas: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """An object schema's properties and required names, through `$ref` and `allOf`."""
    schema = _resolve(schema, schemas)
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


def _nullable(prop: dict[str, Any], schemas: dict[str, Any]) -> bool:
    """Whether OpenAI's spec lets the value be null (OpenAPI 3.0's `nullable` or 3.1's null type)."""
    if prop.get("nullable"):
        return True
    types = prop.get("type")
    if types == "null" or (isinstance(types, list) and "null" in types):
        return True
    if any(_nullable(part, schemas) for part in prop.get("anyOf", []) + prop.get("oneOf", [])):
        return True
    return "$ref" in prop and _nullable(_resolve(prop, schemas), schemas)


def _named(path: str, schemas: dict[str, Any]) -> dict[str, Any]:
    """`Schema`, or `Schema.property[]...`: the schema at that path (`[]`: an array's items)."""
    name, *steps = path.split(".")
    schema = schemas[name]
    for step in steps:
        schema = _flatten(schema, schemas)[0][step.removesuffix("[]")]
        if step.endswith("[]"):
            schema = _resolve(schema, schemas)["items"]
    return schema


def _type_const(prop: dict[str, Any]) -> str | None:
    if "const" in prop:
        return str(prop["const"])
    enum = prop.get("enum") or []
    return str(enum[0]) if len(enum) == 1 else None


def facts(path: str, schemas: dict[str, Any]) -> dict[str, Any]:
    """What the spec says of the object at `path` (see `_named`): its property names, required
    names, the names that may be null and its `type` constant."""
    properties, required = _flatten(_named(path, schemas), schemas)
    return {
        "properties": sorted(properties),
        "required": sorted(required),
        "nullable": sorted(name for name, prop in properties.items() if _nullable(prop, schemas)),
        "type": _type_const(properties.get("type", {})),
    }


def main(spec_path: str) -> None:
    schemas = yaml.safe_load(Path(spec_path).read_text())["components"]["schemas"]
    golden = {ours: {"official": f"OpenAI {theirs}", **facts(theirs, schemas)} for ours, theirs in PAIRS.items()}
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
