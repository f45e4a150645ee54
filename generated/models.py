"""Pydantic models generated from spec/ by tools/generate.py (datamodel-code-generator); do not edit."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, RootModel, StrictBool, StrictFloat, StrictInt
from typing_extensions import TypeAliasType


class AnthropicContentBlockDeltaEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["content_block_delta"]
    index: Annotated[StrictInt, Field(ge=0)]
    delta: AnthropicTextDelta | AnthropicInputJsonDelta | AnthropicThinkingDelta | AnthropicSignatureDelta


class AnthropicContentBlockParam(BaseModel):
    """
    One content block: `text`, `image`, `document`, `tool_use`, `tool_result`, `thinking` (sent back, with its `signature`, possibly empty), `redacted_thinking`, or server-tool blocks (accepted, sent to the model as text or dropped). One loose schema, since clients vary.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    text: str | None = None
    cache_control: dict[str, Any] | None = None
    source: dict[str, Any] | None = None
    id: str | None = None
    """
    A `tool_use` block's id.
    """
    name: str | None = None
    input: Any | None = None
    """
    A `tool_use` block's input, a JSON object.
    """
    tool_use_id: str | None = None
    """
    The `tool_use` a `tool_result` answers.
    """
    content: str | list[AnthropicToolResultContentParam] | None = None
    """
    A `tool_result`'s content, a string or a list of blocks.
    """
    is_error: StrictBool | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    """
    A `redacted_thinking` block's data.
    """
    citations: dict[str, Any] | list[dict[str, Any]] | None = None
    title: str | None = None
    context: str | None = None


class AnthropicContentBlockStartEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["content_block_start"]
    index: Annotated[StrictInt, Field(ge=0)]
    content_block: AnthropicTextBlock | AnthropicToolUseBlock | AnthropicThinkingBlock | AnthropicRedactedThinkingBlock


class AnthropicContentBlockStopEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["content_block_stop"]
    index: Annotated[StrictInt, Field(ge=0)]


class AnthropicCountTokensRequest(BaseModel):
    """
    The prompt parts of a Messages request; counts their tokens as the model would see them.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    model: str
    messages: Annotated[list[AnthropicMessageParam], Field(min_length=1)]
    system: str | list[AnthropicTextBlockParam] | None = None
    """
    The system prompt, a string or a list of text blocks (with `cache_control`, which is accepted and ignored).
    """
    tools: list[AnthropicToolParam] | None = None
    tool_choice: AnthropicToolChoiceParam | None = None
    thinking: AnthropicThinkingParam | None = None
    context_management: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] | None = None


class AnthropicCountTokensResponse(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    input_tokens: Annotated[StrictInt, Field(ge=0)]


class AnthropicError(BaseModel):
    """
    The error inside an Anthropic-shaped error body.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal[
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
        "timeout_error",
    ]
    message: str


class AnthropicErrorResponse(BaseModel):
    """
    The body of every error answer on the Anthropic routes, and the payload of the `error` event of a Messages stream that fails after the 200 was sent.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["error"]
    error: AnthropicError


class AnthropicInputJsonDelta(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["input_json_delta"]
    partial_json: str


class AnthropicMessage(BaseModel):
    """
    The answer of a request without `stream`; also the `message` of `message_start` (with empty content and a null stop_reason).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `msg_…`
    """
    type: Literal["message"]
    role: Literal["assistant"]
    content: list[AnthropicTextBlock | AnthropicToolUseBlock | AnthropicThinkingBlock | AnthropicRedactedThinkingBlock]
    model: str
    """
    The served model's id, or the name of the LoRA adapter the request ran with.
    """
    stop_reason: (
        Literal[
            "end_turn",
            "max_tokens",
            "stop_sequence",
            "tool_use",
            "pause_turn",
            "refusal",
            "model_context_window_exceeded",
        ]
        | None
    )
    stop_sequence: str | None
    """
    The stop sequence that ended generation, when `stop_reason` is `stop_sequence`.
    """
    usage: AnthropicUsage


class AnthropicMessageDelta(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    stop_reason: (
        Literal[
            "end_turn",
            "max_tokens",
            "stop_sequence",
            "tool_use",
            "pause_turn",
            "refusal",
            "model_context_window_exceeded",
        ]
        | None
    )
    stop_sequence: str | None


class AnthropicMessageDeltaEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["message_delta"]
    delta: AnthropicMessageDelta
    usage: AnthropicMessageDeltaUsage


class AnthropicMessageDeltaUsage(BaseModel):
    """
    Cumulative counts at the end of the message.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    output_tokens: Annotated[StrictInt, Field(ge=0)]
    input_tokens: Annotated[StrictInt | None, Field(ge=0)] = None
    cache_creation_input_tokens: Annotated[StrictInt | None, Field(ge=0)] = None
    cache_read_input_tokens: Annotated[StrictInt | None, Field(ge=0)] = None


class AnthropicMessageParam(BaseModel):
    """
    One message. `role` may be `system` (Claude Code's mid-conversation system messages); turns need not alternate, and the last message need not be the user's (an assistant last message is continued).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    role: Literal["user", "assistant", "system"]
    content: str | list[AnthropicContentBlockParam]


class AnthropicMessageStartEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["message_start"]
    message: AnthropicMessage


class AnthropicMessageStopEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["message_stop"]


class AnthropicMessagesRequest(BaseModel):
    """
    A Messages request. Unknown fields (`context_management`, `output_config`, …) are accepted and ignored.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    model: str
    """
    Any string is accepted (e.g. `claude-opus-4-8`); the loaded model answers, or the LoRA adapter of that name when one is loaded.
    """
    messages: Annotated[list[AnthropicMessageParam], Field(min_length=1)]
    max_tokens: Annotated[StrictInt, Field(ge=1)]
    """
    Most tokens to generate. Values above the cap (and the room left in the context) are clamped, not refused (Claude Code sends 32000 or 64000).
    """
    system: str | list[AnthropicTextBlockParam] | None = None
    """
    The system prompt, a string or a list of text blocks (with `cache_control`, which is accepted and ignored).
    """
    stream: StrictBool | None = None
    """
    Answer as server-sent events, each an `event:` line and a `data:` line.
    """
    temperature: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    top_p: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    top_k: Annotated[StrictInt | None, Field(ge=0)] = None
    stop_sequences: list[str] | None = None
    ignore_eos: StrictBool | None = None
    """
    Extension (vLLM). Generate past the model's end-of-sequence and end-of-turn tokens: the answer ends only at its token limit or a stop sequence (what benchmark clients send for answers of a set length).
    """
    tools: list[AnthropicToolParam] | None = None
    tool_choice: AnthropicToolChoiceParam | None = None
    thinking: AnthropicThinkingParam | None = None
    metadata: AnthropicMetadataParam | None = None
    service_tier: str | None = None
    context_management: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    container: str | dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] | None = None


class AnthropicMetadataParam(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    user_id: str | None = None


class AnthropicModelInfo(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["model"]
    id: str
    """
    The served model's id, or a LoRA adapter's name.
    """
    display_name: str
    created_at: AwareDatetime
    """
    RFC 3339.
    """
    lifecycle: Literal["active"]
    """
    Needed by the strict types of recent Anthropic SDKs.
    """
    max_model_len: Annotated[StrictInt, Field(ge=1)]
    """
    Extension (as in the OpenAI shape). The context the server runs, in tokens.
    """


class AnthropicModelList(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    data: list[AnthropicModelInfo]
    has_more: StrictBool
    first_id: str | None
    last_id: str | None


class AnthropicPingEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["ping"]


class AnthropicRedactedThinkingBlock(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["redacted_thinking"]
    data: str


class AnthropicSignatureDelta(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["signature_delta"]
    signature: str


class AnthropicStreamEvent(BaseModel):
    """
    One server-sent event of a Messages stream (OpenAPI 3.1 describes `text/event-stream` by its events): an `event:` line naming the type and a `data:` line holding its JSON (AnthropicStreamPayload).
    """

    event: Literal[
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    ]
    data: Annotated[
        str,
        Field(
            json_schema_extra={
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": "#/components/schemas/AnthropicStreamPayload"},
            }
        ),
    ]


class AnthropicStreamPayload(
    RootModel[
        AnthropicMessageStartEvent
        | AnthropicContentBlockStartEvent
        | AnthropicContentBlockDeltaEvent
        | AnthropicContentBlockStopEvent
        | AnthropicMessageDeltaEvent
        | AnthropicMessageStopEvent
        | AnthropicPingEvent
        | AnthropicErrorResponse
    ]
):
    root: (
        AnthropicMessageStartEvent
        | AnthropicContentBlockStartEvent
        | AnthropicContentBlockDeltaEvent
        | AnthropicContentBlockStopEvent
        | AnthropicMessageDeltaEvent
        | AnthropicMessageStopEvent
        | AnthropicPingEvent
        | AnthropicErrorResponse
    )
    """
    The JSON of one `data:` line of a Messages stream; an `event:` line with the same `type` comes before it. The order is message_start, ping, then per block content_block_start, content_block_delta…, content_block_stop, then message_delta (stop_reason, stop_sequence and the final usage) and message_stop. `ping` also comes whenever the stream waits (the keep-alive); `error` ends a stream that fails after the 200.
    """


class AnthropicTextBlock(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["text"]
    text: str


class AnthropicTextBlockParam(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    type: str | None = None
    """
    `text`.
    """
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None


class AnthropicTextDelta(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["text_delta"]
    text: str


class AnthropicThinkingBlock(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["thinking"]
    thinking: str
    signature: str
    """
    Opaque; pooled accepts its own (or an empty) signature back.
    """


class AnthropicThinkingDelta(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["thinking_delta"]
    thinking: str


class AnthropicThinkingParam(BaseModel):
    """
    `enabled` (with `budget_tokens`), `adaptive` (Claude Code; the model decides) or `disabled`. Turns the chat template's thinking on or off where it can; thinking comes back as `thinking` blocks.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Most tokens to spend thinking (Anthropic asks for at least 1024; pooled takes any). Once they are spent the reasoning is closed and the answer follows. Not applied together with a forced tool call (`tool_choice` `any` or `tool`), whose grammar decides the output alone.
    """
    display: str | None = None


class AnthropicToolChoiceParam(BaseModel):
    """
    `auto`, `any` (some tool), `tool` (the one named), or `none`.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: StrictBool | None = None


class AnthropicToolParam(BaseModel):
    """
    A tool: a client tool `{name, description, input_schema}` (no `type`, or `type: "custom"`), or a server tool with a versioned `type` (accepted and not offered to the model).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str | None = None
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


class AnthropicToolResultContentParam(BaseModel):
    """
    A block inside a `tool_result` (`text`, `image`, `document`, …).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    text: str | None = None
    source: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


class AnthropicToolUseBlock(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["tool_use"]
    id: str
    """
    `toolu_…`
    """
    name: str
    input: dict[str, Any]


class AnthropicUsage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    input_tokens: Annotated[StrictInt, Field(ge=0)]
    """
    Prompt tokens prefilled (not read from the prefix cache); with `cache_read_input_tokens` they add up to the prompt's length (`count_tokens`).
    """
    output_tokens: Annotated[StrictInt, Field(ge=0)]
    cache_creation_input_tokens: Annotated[StrictInt | None, Field(ge=0)]
    """
    Always 0: pooled caches every prompt's prefix without `cache_control` breakpoints.
    """
    cache_read_input_tokens: Annotated[StrictInt | None, Field(ge=0)]
    """
    Prompt tokens served from the prefix cache.
    """


class CatalogList(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["list"]
    data: list[CatalogRow]
    models_dir: str
    """
    The models folder (`--models-dir`).
    """


class CatalogRow(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    family: str
    format: Literal["gguf", "safetensors"]
    size_bytes: Annotated[StrictInt, Field(ge=0)]
    """
    All its files.
    """
    trained_ctx: Annotated[StrictInt, Field(ge=1)]
    licence: str
    size_class: str
    memory_bytes: Annotated[StrictInt, Field(ge=0)]
    """
    What serving it needs.
    """
    state: Literal["absent", "partial", "complete", "verified"]
    """
    On disk: `absent`, `partial` (some bytes, see `bytes_on_disk`), `complete` (every file under its final name, digests not checked by pooled), `verified` (every file's sha256 checked).
    """
    bytes_on_disk: Annotated[StrictInt, Field(ge=0)]
    available: StrictBool
    """
    Whether this machine has the memory to serve it now.
    """
    reason: str | None
    """
    When not available, why (the memory it needs against the memory free).
    """
    loaded: StrictBool
    """
    Whether it is the model being served.
    """
    download: DownloadProgress | None
    """
    The running download of this entry, or its last one; null when none.
    """


class ChatChoiceLogprobs(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    content: list[ChatTokenLogprob] | None
    refusal: list[ChatTokenLogprob] | None


class ChatCompletion(BaseModel):
    """
    The answer of a request without `stream`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `chatcmpl-…`
    """
    object: Literal["chat.completion"]
    created: StrictInt
    """
    Unix time in seconds.
    """
    model: str
    """
    The served model's id (as `/v1/models` lists it), or the name of the LoRA adapter the request ran with.
    """
    choices: list[ChatCompletionChoice]
    usage: CompletionUsage
    prompt_logprobs: list[dict[str, PromptTokenLogprob] | None] | None = None
    """
    Extension (vLLM). The prompt's tokens with their logprobs, when `prompt_logprobs` was asked.
    """


class ChatCompletionChoice(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    index: Annotated[StrictInt, Field(ge=0)]
    message: ChatCompletionMessage
    logprobs: ChatChoiceLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter", "function_call"]
    """
    `stop` (end of turn or a stop string), `length` (max tokens or the context), `tool_calls`.
    """


class ChatCompletionChunk(BaseModel):
    """
    One `data:` line of a streamed answer. The first chunk's delta has `role`; the last choice chunk has a `finish_reason`; with `stream_options.include_usage` a final chunk has empty `choices` and `usage`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    object: Literal["chat.completion.chunk"]
    created: StrictInt
    model: str
    choices: list[ChatCompletionChunkChoice]
    usage: CompletionUsage | UsageSoFar | None = None
    """
    With `stream_options.include_usage`: the request's usage on the final chunk, null on the others, or with `continuous_usage_stats` the counts so far.
    """


class ChatCompletionChunkChoice(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    index: Annotated[StrictInt, Field(ge=0)]
    delta: ChatCompletionChunkDelta
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter", "function_call"] | None


class ChatCompletionChunkDelta(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    """
    Extension (vLLM/DeepSeek style). A piece of the reasoning text. Absent when there is none.
    """
    refusal: str | None = None
    tool_calls: list[ChatCompletionChunkToolCall] | None = None


class ChatCompletionChunkFunctionCall(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    name: str | None = None
    arguments: str | None = None


class ChatCompletionChunkToolCall(BaseModel):
    """
    A piece of a tool call; the first piece of a call has `id`, `type` and `function.name`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    index: Annotated[StrictInt, Field(ge=0)]
    id: str | None = None
    type: Literal["function"] | None = None
    function: ChatCompletionChunkFunctionCall | None = None


class ChatCompletionCustomCall(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    name: str
    input: str


class ChatCompletionCustomToolCall(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    type: Literal["custom"]
    custom: ChatCompletionCustomCall


class ChatCompletionFunctionCall(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    name: str
    arguments: str
    """
    The arguments as a JSON string.
    """


class ChatCompletionFunctionToolCall(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `call_…`
    """
    type: Literal["function"]
    function: ChatCompletionFunctionCall


class ChatCompletionMessage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    role: Literal["assistant"]
    content: str | None
    refusal: str | None
    tool_calls: list[ChatCompletionFunctionToolCall | ChatCompletionCustomToolCall] | None = None
    reasoning_content: str | None = None
    """
    Extension (vLLM/DeepSeek style). The model's reasoning (thinking) text, apart from `content`. Absent when there is none.
    """


class ChatCompletionRequest(BaseModel):
    """
    A Chat Completions request. Unknown fields are accepted and ignored. Sampling runs on the device.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    """
    Any string is accepted; the loaded model answers, or the LoRA adapter of that name when one is loaded (`/v1/models` lists them). The answer's `model` is the served model's id, or the adapter's name.
    """
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[StrictInt | None, Field(ge=1)] = None
    """
    Deprecated alias of `max_completion_tokens`. Values above the cap (and the room left in the context) are clamped, not refused.
    """
    max_completion_tokens: Annotated[StrictInt | None, Field(ge=1)] = None
    """
    Most tokens to generate. Values above the cap (and the room left in the context) are clamped, not refused.
    """
    temperature: Annotated[StrictFloat | None, Field(ge=0.0, le=2.0)] = None
    top_p: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    top_k: Annotated[StrictInt | None, Field(ge=-1)] = None
    """
    Extension (vLLM). Sample from the k most likely tokens; 0 or -1 means all.
    """
    min_p: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    """
    Extension (vLLM). Drop tokens less likely than `min_p` times the most likely one.
    """
    repetition_penalty: Annotated[StrictFloat | None, Field(gt=0.0)] = None
    """
    Extension (vLLM). Multiplicative penalty on tokens already in the prompt or output; 1 is off.
    """
    frequency_penalty: Annotated[StrictFloat | None, Field(ge=-2.0, le=2.0)] = None
    presence_penalty: Annotated[StrictFloat | None, Field(ge=-2.0, le=2.0)] = None
    n: Annotated[StrictInt | None, Field(ge=1, le=128)] = None
    """
    Choices to generate. Each choice is one decode lane; more than the engine's decode lanes is a 400.
    """
    stream: StrictBool | None = None
    """
    Answer as server-sent events of `chat.completion.chunk` objects, ended by `data: [DONE]`.
    """
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    """
    Up to 16 strings where generation stops (more are clamped to the first 16); each at most 1,024 bytes and 4,096 bytes in all, else 400. The stop string is not part of the output.
    """
    ignore_eos: StrictBool | None = None
    """
    Extension (vLLM). Generate past the model's end-of-sequence and end-of-turn tokens: the answer ends only at its token limit or a `stop` string (what benchmark clients send for answers of a set length).
    """
    seed: StrictInt | None = None
    """
    Makes sampling reproducible. Without it each request draws its own seed.
    """
    logprobs: StrictBool | None = None
    """
    Return the log probability of each output token (in streams too, on each chunk).
    """
    top_logprobs: Annotated[StrictInt | None, Field(ge=0, le=20)] = None
    """
    With `logprobs`, also return this many most likely tokens at each position.
    """
    prompt_logprobs: Annotated[StrictInt | None, Field(ge=0, le=20)] = None
    """
    Extension (vLLM). Also return each prompt token's log probability and this many most likely tokens at its position (`prompt_logprobs` in the answer, not in streams). Computed on the device while the prompt prefills; a prompt asking for them is prefilled whole, not read from the prefix cache.
    """
    logit_bias: dict[str, LogitBiasAdditionalProperty] | None = None
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ChatNamedToolChoice | None = None
    """
    `none`, `auto` or `required`, or an object naming one tool (`{"type": "function", "function": {"name": …}}`, `{"type": "custom", "custom": {"name": …}}`) or `{"type": "allowed_tools", …}`.
    """
    parallel_tool_calls: StrictBool | None = None
    response_format: ChatResponseFormat | None = None
    reasoning_effort: str | None = None
    """
    Accepted (`none`, `minimal`, `low`, `medium`, `high`, `xhigh`, …); `none` turns thinking off where the chat template can.
    """
    chat_template_kwargs: dict[str, Any] | None = None
    """
    Extension (vLLM). Extra variables for the chat template, e.g. `{"enable_thinking": false}`.
    """
    lora_adapter: str | None = None
    """
    Extension. The name of a loaded LoRA adapter to run the request with (it takes precedence over `model`); a name that is not loaded is a 400 listing the loaded ones. `GET /v1/lora_adapters` and `/v1/models` list them.
    """
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: StrictBool | None = None
    """
    Accepted and ignored; chat completions are never stored.
    """
    service_tier: str | None = None
    """
    Accepted and ignored.
    """
    prompt_cache_key: str | None = None
    """
    Accepted and ignored; the prefix cache is automatic.
    """
    safety_identifier: str | None = None
    verbosity: str | None = None
    modalities: list[str] | None = None
    functions: list[dict[str, Any]] | None = None
    """
    Deprecated; accepted as function tools.
    """
    function_call: str | dict[str, Any] | None = None
    """
    Deprecated; accepted as `tool_choice`.
    """


class ChatCompletionStreamEvent(BaseModel):
    """
    One server-sent event of a Chat Completions stream (OpenAPI 3.1 describes `text/event-stream` by its events): a `data:` line holding a chunk or a closing error (ChatCompletionStreamPayload), or the final `data: [DONE]`. Comment lines (`: keep-alive`) come every 10 s while the stream waits.
    """

    data: Literal["[DONE]"] | str


class ChatContentPart(BaseModel):
    """
    One part of a message's content: `text`, `image_url`, `input_audio`, `file` or `refusal`. Image parts are a 400 when the served model has no vision front end.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    text: str | None = None
    image_url: dict[str, Any] | None = None
    input_audio: dict[str, Any] | None = None
    file: dict[str, Any] | None = None
    refusal: str | None = None


class ChatCustomCallParam(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    name: str | None = None
    input: str | None = None


class ChatCustomToolDefinition(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    name: str
    description: str | None = None
    format: dict[str, Any] | None = None


class ChatFunctionCallParam(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    name: str | None = None
    arguments: str | None = None
    """
    The arguments as a JSON string (as the model produced them).
    """


class ChatFunctionDefinition(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None
    """
    Accepted; with `strict` true the arguments are constrained to the schema where the engine can.
    """


class ChatJsonSchemaFormat(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    name: str | None = None
    description: str | None = None
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    strict: StrictBool | None = None


class ChatMessage(BaseModel):
    """
    One message of the conversation. One schema for every role, since clients vary: content may be a string, an array of parts, or null/empty next to `tool_calls`; assistant messages may carry `reasoning_content` back.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ChatContentPart] | None = None
    name: str | None = None
    tool_calls: list[ChatMessageToolCallParam] | None = None
    tool_call_id: str | None = None
    """
    On a `tool` message, the id of the call it answers.
    """
    reasoning_content: str | None = None
    """
    Non-standard (vLLM/DeepSeek); an assistant message's reasoning, sent back by clients.
    """
    reasoning: str | None = None
    """
    Non-standard alias of `reasoning_content`.
    """
    refusal: str | None = None
    function_call: dict[str, Any] | None = None
    """
    Deprecated assistant function call.
    """


class ChatMessageToolCallParam(BaseModel):
    """
    A tool call on an assistant message sent back by the client (`function` or `custom`).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    id: str | None = None
    type: str | None = None
    function: ChatFunctionCallParam | None = None
    custom: ChatCustomCallParam | None = None
    index: StrictInt | None = None


class ChatNamedToolChoice(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    function: dict[str, Any] | None = None
    custom: dict[str, Any] | None = None
    allowed_tools: dict[str, Any] | None = None


class ChatResponseFormat(BaseModel):
    """
    `{"type": "text"}`, `{"type": "json_object"}`, or `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`; JSON output is constrained on the device. A schema the engine cannot constrain to is a 400.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: Literal["text", "json_object", "json_schema"]
    json_schema: ChatJsonSchemaFormat | None = None


class ChatTokenLogprob(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    token: str
    logprob: StrictFloat
    bytes: list[StrictInt] | None
    top_logprobs: list[ChatTopLogprob]


class ChatTool(BaseModel):
    """
    A tool the model may call. `function` tools are served; `custom` (free-form input) tools too. Other types are accepted and ignored.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    """
    `function` or `custom`.
    """
    function: ChatFunctionDefinition | None = None
    custom: ChatCustomToolDefinition | None = None


class ChatTopLogprob(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    token: str
    logprob: StrictFloat
    bytes: list[StrictInt] | None


class ChoiceAnswer(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["choice"]
    choice: str
    """
    The most probable option.
    """
    probabilities: dict[str, StrictFloat]
    """
    Every option's probability (they sum to 1).
    """
    confidence: StrictFloat
    """
    (p_max − 1/n) / (1 − 1/n), 0 at uniform and 1 at certainty (1 for a single option).
    """


class Completion(BaseModel):
    """
    The answer of a request without `stream`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `cmpl-…`
    """
    object: Literal["text_completion"]
    created: StrictInt
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage


class CompletionChoice(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    index: Annotated[StrictInt, Field(ge=0)]
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length", "content_filter"]
    prompt_logprobs: list[dict[str, PromptTokenLogprob] | None] | None = None
    """
    Extension (vLLM). The prompt's tokens with their logprobs, when `prompt_logprobs` was asked.
    """


class CompletionChunk(BaseModel):
    """
    One `data:` line of a streamed completion.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    object: Literal["text_completion"]
    created: StrictInt
    model: str
    choices: list[CompletionChunkChoice]
    usage: CompletionUsage | UsageSoFar | None = None
    """
    With `stream_options.include_usage`: the request's usage on the final chunk, null on the others, or with `continuous_usage_stats` the counts so far.
    """


class CompletionChunkChoice(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    index: Annotated[StrictInt, Field(ge=0)]
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length", "content_filter"] | None


class CompletionLogprobs(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    tokens: list[str]
    token_logprobs: list[StrictFloat | None]
    """
    Null for the first prompt token under `echo` (it has no context).
    """
    top_logprobs: list[dict[str, StrictFloat] | None]
    text_offset: list[StrictInt]


class CompletionRequest(BaseModel):
    """
    A text completion request. Unknown fields are accepted and ignored.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    """
    Any string is accepted; the loaded model answers, or the LoRA adapter of that name when one is loaded (`/v1/models` lists them).
    """
    prompt: str | list[str] | list[StrictInt] | list[list[StrictInt]]
    """
    The prompt: a string, an array of strings (one completion each), an array of token ids, or an array of token-id arrays. An empty prompt is a 400.
    """
    lora_adapter: str | None = None
    """
    Extension. The name of a loaded LoRA adapter to run the request with (it takes precedence over `model`); a name that is not loaded is a 400 listing the loaded ones. `GET /v1/lora_adapters` and `/v1/models` list them.
    """
    suffix: str | None = None
    """
    Text that comes after the completion (fill-in-the-middle). Not served; a non-empty suffix is a 400.
    """
    max_tokens: Annotated[StrictInt | None, Field(ge=1)] = None
    """
    Most tokens to generate (default 16). Values above the cap are clamped, not refused.
    """
    temperature: Annotated[StrictFloat | None, Field(ge=0.0, le=2.0)] = None
    top_p: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    top_k: Annotated[StrictInt | None, Field(ge=-1)] = None
    """
    Extension (vLLM). 0 or -1 means all tokens.
    """
    min_p: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    """
    Extension (vLLM).
    """
    repetition_penalty: Annotated[StrictFloat | None, Field(gt=0.0)] = None
    """
    Extension (vLLM); 1 is off.
    """
    frequency_penalty: Annotated[StrictFloat | None, Field(ge=-2.0, le=2.0)] = None
    presence_penalty: Annotated[StrictFloat | None, Field(ge=-2.0, le=2.0)] = None
    n: Annotated[StrictInt | None, Field(ge=1, le=128)] = None
    """
    Completions per prompt. More than the engine's decode lanes is a 400.
    """
    best_of: Annotated[StrictInt | None, Field(ge=0, le=20)] = None
    """
    1 or `n` (pooled does not rank candidates); any other value is a 400.
    """
    stream: StrictBool | None = None
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    """
    Up to 16 strings where generation stops (more are clamped to the first 16); each at most 1,024 bytes and 4,096 bytes in all, else 400. The stop string is not part of the output.
    """
    ignore_eos: StrictBool | None = None
    """
    Extension (vLLM). Generate past the model's end-of-sequence and end-of-turn tokens: the answer ends only at its token limit or a `stop` string (what benchmark clients send for answers of a set length).
    """
    seed: StrictInt | None = None
    logprobs: Annotated[StrictInt | None, Field(ge=0, le=5)] = None
    """
    Return the log probabilities of this many most likely tokens at each position (in streams too, on each chunk). With `echo`, the prompt's tokens too (the first has none: null).
    """
    prompt_logprobs: Annotated[StrictInt | None, Field(ge=0, le=20)] = None
    """
    Extension (vLLM). Also return each prompt token's log probability and this many most likely tokens at its position (`prompt_logprobs` in the answer, not in streams). Computed on the device while the prompt prefills; a prompt asking for them is prefilled whole, not read from the prefix cache.
    """
    echo: StrictBool | None = None
    """
    Put the prompt before the completion in `text`.
    """
    logit_bias: dict[str, LogitBiasAdditionalProperty] | None = None
    user: str | None = None


class CompletionStreamEvent(BaseModel):
    """
    One server-sent event of a Completions stream: a `data:` line holding a chunk or a closing error (CompletionStreamPayload), or the final `data: [DONE]`. Comment lines (`: keep-alive`) come every 10 s while the stream waits.
    """

    data: Literal["[DONE]"] | str


class CompletionTokensDetails(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    reasoning_tokens: Annotated[StrictInt, Field(ge=0)]
    """
    Completion tokens spent on reasoning (thinking) text.
    """


class CompletionUsage(BaseModel):
    """
    Token counts of one request.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    prompt_tokens: Annotated[StrictInt, Field(ge=0)]
    completion_tokens: Annotated[StrictInt, Field(ge=0)]
    total_tokens: Annotated[StrictInt, Field(ge=0)]
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails | None = None


class Config(BaseModel):
    """
    The settings in force, by name, as JSON: a list setting is an array of strings (a NAME=VALUE pair as that text), an unset one is null. Secret settings (`api_key`) are left out. Each setting is described by `GET /v1/config/fields`; `(live)` ones change with `PATCH /v1/config` at once, `(reload)` ones with `?reload=true`, `(restart)` ones only by starting the server again.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    ctx: Annotated[StrictInt | None, Field(ge=1)]
    """
    `--ctx` (reload)
    """
    rope_scaling: str | None
    """
    `--rope-scaling` (reload)
    """
    decode_lanes: Annotated[StrictInt, Field(ge=1)]
    """
    `--decode-lanes` (reload)
    """
    dtype: str
    """
    `--dtype` (reload)
    """
    quantization: Literal["auto", "none", "gguf", "w8a8", "w4a8"]
    """
    `--quantization` (reload)
    """
    kv_cache_dtype: Literal["bfloat16", "float32", "auto"]
    """
    `--kv-cache-dtype` (reload)
    """
    kv_memory: Annotated[StrictInt | None, Field(ge=1)]
    """
    `--kv-memory` (reload)
    """
    page_size: Annotated[StrictInt, Field(ge=1)]
    """
    `--page-size` (reload)
    """
    prefill_chunk: Annotated[StrictInt, Field(ge=1)]
    """
    `--prefill-chunk` (reload)
    """
    draft_tokens: Annotated[StrictInt, Field(ge=0)]
    """
    `--draft-tokens` (reload)
    """
    draft_rows: Annotated[StrictInt, Field(ge=0)]
    """
    `--draft-rows` (reload)
    """
    burst_steps: Annotated[StrictInt, Field(ge=0)]
    """
    `--burst-steps` (reload)
    """
    burst_max_step_ms: Annotated[StrictFloat, Field(ge=0.0)]
    """
    `--burst-max-step-ms` (reload)
    """
    compile_while_serving: StrictBool
    """
    `--compile-while-serving` (reload)
    """
    vision_enabled: StrictBool
    """
    `--vision-enabled` (reload)
    """
    max_image_pixels: Annotated[StrictInt, Field(ge=3136)]
    """
    `--max-image-pixels` (reload)
    """
    image_cache: Annotated[StrictInt, Field(ge=0)]
    """
    `--image-cache` (reload)
    """
    prefix_cache_dir: str
    """
    `--prefix-cache-dir` (reload)
    """
    prefix_cache_disk: Annotated[StrictInt, Field(ge=0)]
    """
    `--prefix-cache-disk` (reload)
    """
    devices: Annotated[StrictInt | None, Field(ge=1)]
    """
    `--devices` (reload)
    """
    coordinator: str | None
    """
    `--coordinator` (restart)
    """
    num_processes: Annotated[StrictInt | None, Field(ge=1)]
    """
    `--num-processes` (restart)
    """
    process_id: Annotated[StrictInt | None, Field(ge=0)]
    """
    `--process-id` (restart)
    """
    group_step_timeout: Annotated[StrictFloat, Field(gt=0.0)]
    """
    `--group-step-timeout` (restart)
    """
    group_heartbeat_timeout: Annotated[StrictInt, Field(ge=1)]
    """
    `--group-heartbeat-timeout` (restart)
    """
    speech_model: str | None
    """
    `--speech-model` (reload)
    """
    max_audio_bytes: Annotated[StrictInt, Field(ge=1)]
    """
    `--max-audio-bytes` (live)
    """
    max_audio_seconds: Annotated[StrictFloat, Field(gt=0.0)]
    """
    `--max-audio-seconds` (live)
    """
    speech_lanes: Annotated[StrictInt, Field(ge=1)]
    """
    `--speech-lanes` (reload)
    """
    config: str | None
    """
    `--config` (restart)
    """
    profile: str | None
    """
    `--profile` (restart)
    """
    model: str | None
    """
    `--model` (restart)
    """
    mmproj: str | None
    """
    `--mmproj` (restart)
    """
    models_dir: str
    """
    `--models-dir` (restart)
    """
    catalog: str | None
    """
    `--catalog` (restart)
    """
    switch_allow_implicit: StrictBool
    """
    `--switch-allow-implicit` (live)
    """
    download_retries: Annotated[StrictInt, Field(ge=1)]
    """
    `--download-retries` (restart)
    """
    download_stall_timeout: Annotated[StrictFloat, Field(gt=0.0)]
    """
    `--download-stall-timeout` (restart)
    """
    embedding_model: str | None
    """
    `--embedding-model` (reload)
    """
    embeddings: StrictBool
    """
    `--embeddings` (reload)
    """
    embedding_max_tokens: Annotated[StrictInt, Field(ge=1)]
    """
    `--embedding-max-tokens` (reload)
    """
    rerank_model: str | None
    """
    `--rerank-model` (reload)
    """
    encoder_batch_tokens: Annotated[StrictInt, Field(ge=1)]
    """
    `--encoder-batch-tokens` (reload)
    """
    max_embedding_inputs: Annotated[StrictInt, Field(ge=1)]
    """
    `--max-embedding-inputs` (live)
    """
    max_images: Annotated[StrictInt, Field(ge=1)]
    """
    `--max-images` (live)
    """
    image_url_fetch: StrictBool
    """
    `--image-url-fetch` (live)
    """
    image_fetch_timeout: Annotated[StrictFloat, Field(gt=0.0)]
    """
    `--image-fetch-timeout` (live)
    """
    image_fetch_max_bytes: Annotated[StrictInt, Field(ge=1)]
    """
    `--image-fetch-max-bytes` (live)
    """
    max_loras: Annotated[StrictInt, Field(ge=0)]
    """
    `--max-loras` (reload)
    """
    max_lora_rank: Annotated[StrictInt, Field(ge=1)]
    """
    `--max-lora-rank` (reload)
    """
    lora: list[str]
    """
    `--lora` (reload)
    """
    lora_root: list[str]
    """
    `--lora-root` (reload)
    """
    lora_max_bytes: Annotated[StrictInt, Field(ge=1)]
    """
    `--lora-max-bytes` (reload)
    """
    lora_sha256: list[str]
    """
    `--lora-sha256` (reload)
    """
    lora_admin: StrictBool
    """
    `--lora-admin` (live)
    """
    server_ui: StrictBool
    """
    `--server-ui` (restart)
    """
    log_level: Literal["debug", "info", "warning", "error"]
    """
    `--log-level` (restart)
    """
    host: str
    """
    `--host` (restart)
    """
    port: Annotated[StrictInt, Field(ge=0, le=65535)]
    """
    `--port` (restart)
    """
    metrics_bind: str | None
    """
    `--metrics-bind` (restart)
    """
    allow_host: list[str]
    """
    `--allow-host` (restart)
    """
    allow_origin: list[str]
    """
    `--allow-origin` (live)
    """
    max_body: Annotated[StrictInt, Field(ge=1)]
    """
    `--max-body` (live)
    """
    max_queue: Annotated[StrictInt, Field(ge=0)]
    """
    `--max-queue` (live)
    """
    rate_limit_rpm: Annotated[StrictInt | None, Field(ge=1)]
    """
    `--rate-limit-rpm` (restart)
    """
    stored_responses: Annotated[StrictInt, Field(ge=0)]
    """
    `--stored-responses` (restart)
    """
    stored_responses_bytes: Annotated[StrictInt, Field(ge=0)]
    """
    `--stored-responses-bytes` (restart)
    """
    stored_response_idle: Annotated[StrictFloat, Field(gt=0.0)]
    """
    `--stored-response-idle` (restart)
    """
    drain_grace: Annotated[StrictFloat, Field(ge=0.0)]
    """
    `--drain-grace` (restart)
    """
    idle_unload: Annotated[StrictFloat | None, Field(gt=0.0)]
    """
    `--idle-unload` (live)
    """
    switch_grace: Annotated[StrictFloat, Field(ge=0.0)]
    """
    `--switch-grace` (live)
    """
    request_timeout: Annotated[StrictFloat, Field(gt=0.0)]
    """
    `--request-timeout` (live)
    """
    max_output_tokens: Annotated[StrictInt | None, Field(ge=1)]
    """
    `--max-output-tokens` (live)
    """
    max_output_tokens_finish: Literal["length", "stop"]
    """
    `--max-output-tokens-finish` (live)
    """
    temp: Annotated[StrictFloat, Field(ge=0.0, le=2.0)]
    """
    `--temp` (live): the temperature of a request that names none
    """
    top_k: Annotated[StrictInt, Field(ge=0)]
    """
    `--top-k` (live): the top-k of a request that names none
    """
    top_p: Annotated[StrictFloat, Field(ge=0.0, le=1.0)]
    """
    `--top-p` (live): the top-p of a request that names none
    """
    min_p: Annotated[StrictFloat, Field(ge=0.0, le=1.0)]
    """
    `--min-p` (live): the min-p of a request that names none
    """
    repeat_penalty: Annotated[StrictFloat, Field(gt=0.0)]
    """
    `--repeat-penalty` (live): the repetition penalty of a request that names none
    """
    keepalive_interval: Annotated[StrictFloat, Field(gt=0.0)]
    """
    `--keepalive-interval` (live)
    """
    volatile_line_pattern: str | None
    """
    `--volatile-line-pattern` (live)
    """


class ConfigField(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    name: str
    """
    The setting's name in `/v1/config`, the config file and `PATCH /v1/config`.
    """
    kind: Literal["string", "integer", "number", "boolean", "list"]
    """
    The JSON type of its value; `list` is an array of strings.
    """
    nullable: StrictBool
    """
    Whether it may be unset (null).
    """
    default: Any
    """
    Its default, as JSON (null for a secret one).
    """
    rule: ConfigRule | None
    """
    The values it allows beyond its kind, or null when any value of its kind is allowed.
    """
    change: Literal["live", "reload", "restart"]
    """
    How a change takes effect: `live`, at once by `PATCH /v1/config`; `reload`, by `PATCH /v1/config?reload=true`, which loads the model again with it; `restart`, only by starting the server again.
    """
    secret: StrictBool
    """
    A secret setting is never shown by `GET /v1/config` and cannot be changed by `PATCH`.
    """
    flag: str
    """
    Its command-line flag.
    """
    env: str
    """
    Its environment variable.
    """
    help: str


class ConfigFieldList(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["list"]
    data: list[ConfigField]
    """
    Every setting, in the order of docs/configuration.md.
    """


class ConfigOrigin(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    origin: Literal[
        "default",
        "gguf",
        "generation_config",
        "catalog",
        "profile",
        "file",
        "env",
        "flag",
        "live",
    ]
    """
    Where a setting's value came from: `default`, its default (for the sampling settings, the APIs' own); `gguf`, the served model's GGUF file (its `general.sampling.*` keys, llama.cpp's); `generation_config`, the served safetensors model's generation_config.json; `catalog`, the served model's catalog entry (its `[model.serving]` table: a default of that model's own); `profile`, a `[profile.NAME]` table of the config file (`--profile`); `file`, the config file (`--config`); `env`, its `POOLED_*` variable; `flag`, its command-line flag; `live`, changed by `PATCH /v1/config` since the start. A model's own (`gguf`, `generation_config`, `catalog`) sit below everything the user sets, the catalog's above the file's.
    """
    file: str | None = None
    """
    The config file, for a value from it or its profile; the served model's GGUF file or generation_config.json, for a value from it.
    """
    profile: str | None = None
    """
    The profile's name, for a value from one.
    """
    catalog: str | None = None
    """
    The catalog entry's id, for a value from it.
    """
    reason: str | None = None
    """
    Why the catalog entry sets it, for a value from it.
    """


class ConfigOrigins(BaseModel):
    """
    Setting name → where its value in force came from (every setting, secret ones too).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    ctx: ConfigOrigin
    rope_scaling: ConfigOrigin
    decode_lanes: ConfigOrigin
    dtype: ConfigOrigin
    quantization: ConfigOrigin
    kv_cache_dtype: ConfigOrigin
    kv_memory: ConfigOrigin
    page_size: ConfigOrigin
    prefill_chunk: ConfigOrigin
    draft_tokens: ConfigOrigin
    draft_rows: ConfigOrigin
    burst_steps: ConfigOrigin
    burst_max_step_ms: ConfigOrigin
    compile_while_serving: ConfigOrigin
    vision_enabled: ConfigOrigin
    max_image_pixels: ConfigOrigin
    image_cache: ConfigOrigin
    prefix_cache_dir: ConfigOrigin
    prefix_cache_disk: ConfigOrigin
    devices: ConfigOrigin
    coordinator: ConfigOrigin
    num_processes: ConfigOrigin
    process_id: ConfigOrigin
    group_step_timeout: ConfigOrigin
    group_heartbeat_timeout: ConfigOrigin
    speech_model: ConfigOrigin
    max_audio_bytes: ConfigOrigin
    max_audio_seconds: ConfigOrigin
    speech_lanes: ConfigOrigin
    config: ConfigOrigin
    profile: ConfigOrigin
    model: ConfigOrigin
    mmproj: ConfigOrigin
    models_dir: ConfigOrigin
    catalog: ConfigOrigin
    switch_allow_implicit: ConfigOrigin
    download_retries: ConfigOrigin
    download_stall_timeout: ConfigOrigin
    embedding_model: ConfigOrigin
    embeddings: ConfigOrigin
    embedding_max_tokens: ConfigOrigin
    rerank_model: ConfigOrigin
    encoder_batch_tokens: ConfigOrigin
    max_embedding_inputs: ConfigOrigin
    max_images: ConfigOrigin
    image_url_fetch: ConfigOrigin
    image_fetch_timeout: ConfigOrigin
    image_fetch_max_bytes: ConfigOrigin
    max_loras: ConfigOrigin
    max_lora_rank: ConfigOrigin
    lora: ConfigOrigin
    lora_root: ConfigOrigin
    lora_max_bytes: ConfigOrigin
    lora_sha256: ConfigOrigin
    lora_admin: ConfigOrigin
    server_ui: ConfigOrigin
    log_level: ConfigOrigin
    host: ConfigOrigin
    port: ConfigOrigin
    api_key: ConfigOrigin
    metrics_bind: ConfigOrigin
    allow_host: ConfigOrigin
    allow_origin: ConfigOrigin
    max_body: ConfigOrigin
    max_queue: ConfigOrigin
    rate_limit_rpm: ConfigOrigin
    stored_responses: ConfigOrigin
    stored_responses_bytes: ConfigOrigin
    stored_response_idle: ConfigOrigin
    drain_grace: ConfigOrigin
    idle_unload: ConfigOrigin
    switch_grace: ConfigOrigin
    request_timeout: ConfigOrigin
    max_output_tokens: ConfigOrigin
    max_output_tokens_finish: ConfigOrigin
    temp: ConfigOrigin
    top_k: ConfigOrigin
    top_p: ConfigOrigin
    min_p: ConfigOrigin
    repeat_penalty: ConfigOrigin
    keepalive_interval: ConfigOrigin
    volatile_line_pattern: ConfigOrigin


class ConfigPatch(BaseModel):
    """
    Setting name → new value, as `GET /v1/config` shows values (JSON of the setting's kind: an integer setting takes an integer, not a string; null unsets a setting that may be unset; a list setting takes an array of strings). Every value is checked before any is applied: an unknown name or a bad value is a 400 naming it and what it takes, and nothing changes. A setting given the value it already has is no change.
    """

    model_config = ConfigDict(
        extra="allow",
    )


class ConfigRule(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    minimum: StrictFloat | None = None
    """
    The least value allowed.
    """
    exclusive_minimum: StrictFloat | None = None
    """
    Every value must be above it.
    """
    maximum: StrictFloat | None = None
    """
    The largest value allowed.
    """
    choices: list[str] | None = None
    """
    The values allowed.
    """


class CreateResponseRequest(BaseModel):
    """
    A Responses request. Unknown fields (e.g. Codex's `client_metadata`) are accepted and ignored. `input` may be absent when `previous_response_id` names a stored response.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    """
    Any string is accepted; the loaded model answers, or the LoRA adapter of that name when one is loaded (`/v1/models` lists them).
    """
    input: str | list[ResponseInputItemParam] | None = None
    """
    A string (one user message), or a list of input items.
    """
    instructions: str | None = None
    """
    A system message put before the input. Not carried over from `previous_response_id`.
    """
    previous_response_id: str | None = None
    """
    A response this process stored; its input and output come before `input`. Unknown or expired is a 400 with code `previous_response_not_found` and param `previous_response_id`.
    """
    tools: list[ResponseToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | ResponseToolChoiceObjectParam | None = None
    """
    `none`, `auto` or `required`, or an object naming one tool (`{"type": "function", "name": …}`, `{"type": "custom", "name": …}`, `{"type": "allowed_tools", …}`).
    """
    parallel_tool_calls: StrictBool | None = None
    max_output_tokens: Annotated[StrictInt | None, Field(ge=1)] = None
    """
    Most tokens to generate, reasoning included. Values above the cap (and the room left in the context) are clamped, not refused.
    """
    max_tool_calls: Annotated[StrictInt | None, Field(ge=0)] = None
    temperature: Annotated[StrictFloat | None, Field(ge=0.0, le=2.0)] = None
    top_p: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    top_logprobs: Annotated[StrictInt | None, Field(ge=0, le=20)] = None
    ignore_eos: StrictBool | None = None
    """
    Extension (vLLM). Generate past the model's end-of-sequence and end-of-turn tokens: the answer ends only at its token limit (`max_output_tokens`, the server's cap or the context), as benchmark clients want for answers of a set length.
    """
    reasoning: ResponseReasoningParam | None = None
    text: ResponseTextParam | None = None
    store: StrictBool | None = None
    """
    Store the response in memory (default true) for `previous_response_id` and GET. Stored responses are dropped after an hour unused, or when the store is full.
    """
    stream: StrictBool | None = None
    """
    Answer as server-sent events (`event:` and `data:` lines), ending with `response.completed`, `response.incomplete` or `response.failed`.
    """
    stream_options: ResponseStreamOptionsParam | None = None
    include: list[str] | None = None
    """
    Accepted (e.g. `reasoning.encrypted_content`); pooled has nothing extra to include.
    """
    metadata: dict[str, str] | None = None
    """
    String pairs, echoed on the Response.
    """
    truncation: str | None = None
    """
    `disabled` (default) or `auto`. Accepted; a prompt over the context is a 400 either way.
    """
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    """
    Accepted and ignored; the prefix cache is automatic.
    """
    prompt_cache_retention: str | None = None
    service_tier: str | None = None
    background: StrictBool | None = None
    """
    Accepted; background mode is not served, so true is a 400.
    """
    prompt: dict[str, Any] | None = None
    """
    Prompt templates are not served; accepted only as null.
    """
    conversation: str | dict[str, Any] | None = None
    """
    Conversations are not served; accepted only as null.
    """
    context_management: list[dict[str, Any]] | None = None
    """
    Accepted and ignored.
    """


class DecisionQuestion(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    """
    `choice` (one of named options), `score` (a level of a rubric) or `noul` (true or false).
    """
    instructions: str | dict[str, Any] | list[Any] | None = None
    """
    The question (a string, or JSON given as compact text); empty or absent leaves it out.
    """
    criteria: dict[str, Any] | list[Any] | None = None
    """
    `choice`: an object of option name to description (null: the name says it), 1 to 26 options; `score`: an array of 2 to 26 level descriptions, lowest first; `noul`: absent, null or an object with `true` and `false` descriptions.
    """


class DecisionRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    state: str | dict[str, Any] | list[Any] | StrictFloat | StrictBool
    """
    The content to decide about: a string, or any other JSON value, given to the model as compact JSON text.
    """
    questions: dict[str, DecisionQuestion]
    """
    The questions, answered under the same ids (at least one).
    """
    calibration: str | None = None
    """
    `raw` asks for the plain label probabilities; pooled applies no fitted temperatures, so every answer is raw.
    """


class DecisionResponse(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    model: str
    answers: dict[str, ChoiceAnswer | ScoreAnswer | NoulAnswer]
    usage: DecisionUsage
    latency_ms: StrictFloat
    """
    Milliseconds from the request's arrival to its answer.
    """


class DecisionUsage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    input_tokens: StrictInt
    """
    The prompt tokens of every question together.
    """
    output_tokens: StrictInt
    """
    Always 0 (nothing is generated).
    """


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    tokens: list[StrictInt]
    """
    Token ids; an id outside the vocabulary is a 400.
    """


class DetokenizeResponse(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    prompt: str


class DownloadCancelled(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    cancelled: StrictBool
    """
    Whether a download was running.
    """
    download: DownloadProgress | None


class DownloadProgress(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    state: Literal["running", "done", "failed", "cancelled"]
    bytes: Annotated[StrictInt, Field(ge=0)]
    """
    On disk now, resumed bytes included.
    """
    total: Annotated[StrictInt, Field(ge=0)]
    rate_bytes_per_s: Annotated[StrictFloat, Field(ge=0.0)]
    eta_s: Annotated[StrictFloat | None, Field(ge=0.0)]
    """
    Seconds left at the current rate; null when not running or not known.
    """
    error: str | None
    """
    When failed: why (a digest mismatch naming both digests, a full disk, an HTTP status, retries spent).
    """


class EmbeddingObject(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["embedding"]
    index: Annotated[StrictInt, Field(ge=0)]
    embedding: list[StrictFloat] | str
    """
    The vector, or with `encoding_format` `base64` its float32 bytes in base64.
    """


class EmbeddingRequest(BaseModel):
    """
    An embeddings request, served by an embedding encoder.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    """
    An embedding model's name from /v1/models; any other string goes to the loaded embedding model.
    """
    input: str | list[str] | list[StrictInt] | list[list[StrictInt]]
    """
    A string, an array of strings, an array of token ids, or an array of token-id arrays. Empty input is a 400.
    """
    encoding_format: Literal["float", "base64"] | None = None
    """
    `float` (default) or `base64` (little-endian float32, base64-encoded).
    """
    dimensions: Annotated[StrictInt | None, Field(ge=1)] = None
    """
    Keep each embedding's first this many dimensions (then re-normalise, if the model normalises). Only a Matryoshka model (`is_matryoshka` or `matryoshka_dimensions` in its config.json) takes it; another model, or more than the model has, is a 400.
    """
    truncate_prompt_tokens: Annotated[StrictInt | None, Field(ge=-1)] = None
    """
    vLLM's field: cut each input to its first this many tokens (special tokens kept) instead of answering 400 for an input over the model's limit; -1 is the model's limit. 0 is a 400.
    """
    user: str | None = None


class EmbeddingResponse(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["list"]
    data: list[EmbeddingObject]
    model: str
    usage: EmbeddingUsage


class EmbeddingUsage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    prompt_tokens: Annotated[StrictInt, Field(ge=0)]
    total_tokens: Annotated[StrictInt, Field(ge=0)]


class Health(BaseModel):
    """
    The full status, for scripts. Given when the server has no token, or the caller sent it.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    ok: StrictBool
    """
    The process answers and its engine is not dead.
    """
    state: Literal["loading", "serving", "switching", "unloaded", "draining", "dead"]
    """
    `loading` (the model is being read, compiled or warmed up), `serving`, `switching` (one model is replaced by another: the old one's requests finish, then the new one loads), `unloaded` (freed after `--idle-unload` seconds without requests; the next request loads it again), `draining` (a shutdown lets in-flight requests finish), `dead` (the engine thread has ended; see `cause` and `reason`).
    """
    ready: StrictBool
    """
    The model is loaded and can answer.
    """
    model: str | None
    """
    The id `/v1/models` lists, or null before the model is known.
    """
    kind: Literal["chat", "embedding", "rerank", "speech"]
    """
    What the model serves: the generation routes (`chat`), or, for an encoder given as `--model`, its embedding or rerank routes only, or, for a Whisper model given as `--model`, the audio routes only (`chat` until a load says otherwise).
    """
    ctx: Annotated[StrictInt | None, Field(ge=1)]
    """
    The context the server runs, in tokens, or null before it is settled.
    """
    trained_ctx: Annotated[StrictInt | None, Field(ge=1)]
    """
    The checkpoint's trained context, in tokens, or null before the model is loaded.
    """
    rope_scaling: str | None
    """
    The RoPE scaling (`dynamic`, `yarn` or `linear`) that extends `ctx` past `trained_ctx` (without `--ctx`, a model trained on less than 32768 tokens is extended to it, by default with dynamic NTK); null when the context is within the trained length.
    """
    quantization: Literal["none", "gguf", "w8a8", "w4a8"] | None
    """
    How the weights are served (`--quantization`, with `auto` resolved where the native CPU kernels run: `w4a8` for a GGUF whose projections are Q4_1, `gguf` for any other GGUF whose matrices are all in served block formats, else `none`), or null before the model is loaded.
    """
    weight_formats: dict[str, Any] | None
    """
    With `quantization` gguf, the block formats the matrices are served in, each with how many matrices it holds (e.g. a Q4_K_M file of SmolLM2: `{"Q4_K": 16, "Q5_0": 166, "Q6_K": 14, "Q8_0": 14}`); null otherwise or before the model is loaded.
    """
    sampling_defaults: HealthSamplingDefaults
    queue: Annotated[StrictInt, Field(ge=0)]
    """
    Requests waiting or running.
    """
    served: Annotated[StrictInt, Field(ge=0)]
    """
    Requests answered since start.
    """
    progress: HealthProgress | None
    """
    While loading, how far it got; null otherwise.
    """
    cause: str | None
    """
    When dead, what ended the engine (`panicked`, `fault`, …); null otherwise.
    """
    reason: str | None
    """
    When dead, a sentence saying why; null otherwise.
    """
    engine: HealthEngine | None
    """
    The engine plan it settled on; null while loading, and for an encoder served alone.
    """
    download: DownloadProgress | None
    """
    The running (or last) download into the models folder; null when none ran.
    """
    failed_parts: list[HealthFailedPart]
    """
    The models given beside the served one (`--embedding-model`, `--rerank-model`, `--speech-model`) that did not load: the routes each would serve answer 503 naming the failure, while the model itself serves (`ok` stays true). Empty when none failed, and until the model is loaded.
    """
    released: HealthReleased | None
    """
    What the last idle unload (`--idle-unload`) gave back, once it has finished (the state says unloaded as it begins); null before any.
    """


class HealthBucket(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    kind: str
    """
    The compiled step, e.g. `prefill` or `decode`.
    """
    rows: Annotated[StrictInt, Field(ge=0)]
    """
    Batch rows of the step.
    """
    tokens: Annotated[StrictInt, Field(ge=0)]
    """
    Tokens per row (the prefill chunk, or 1 for decode).
    """
    pages: Annotated[StrictInt, Field(ge=0)]
    """
    KV pages per row the step reads.
    """


class HealthEngine(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    decode_lanes: Annotated[StrictInt, Field(ge=1)]
    """
    Requests (or choices) decoded at once.
    """
    buckets: list[HealthBucket]
    """
    The shapes compiled so far: at start-up the largest of each kind (any step fits it), then, with --compile-while-serving, the smaller ones as the engine compiles them while idle. A request never triggers a compile: it is padded to the smallest compiled shape that holds it.
    """
    pending_buckets: Annotated[StrictInt, Field(ge=0)]
    """
    Shapes still to compile while serving (0 once every shape is ready); until then a step may be padded to a larger shape than it will be later.
    """
    compiles_after_startup: Annotated[StrictInt, Field(ge=0)]
    """
    XLA compilations since serving began, other than the planned shapes' (should stay 0).
    """
    kv_pages: HealthKvPages


class HealthFailedPart(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    setting: Literal["embedding_model", "rerank_model", "speech_model"]
    """
    The setting that names the model (`--embedding-model`, `--rerank-model`, `--speech-model`).
    """
    path: str
    reason: str
    """
    Why it did not load, in a sentence.
    """


class HealthKvPages(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    total: Annotated[StrictInt, Field(ge=0)]
    used: Annotated[StrictInt, Field(ge=0)]


class HealthMinimal(BaseModel):
    """
    What a caller without the token gets when the server has one.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    ok: Literal[True]


class HealthProgress(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    stage: str
    """
    e.g. `reading`, `compiling`, `warmup`.
    """
    done: Annotated[StrictInt, Field(ge=0)]
    total: Annotated[StrictInt | None, Field(ge=0)]
    """
    Null when not known yet.
    """


class HealthReleased(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    kv_cache_bytes: Annotated[StrictInt, Field(ge=0)]
    """
    Bytes of the KV cache's device arrays that no longer exist after the unload.
    """
    weights_bytes: Annotated[StrictInt, Field(ge=0)]
    """
    Bytes of the weights' device arrays (the model's, its encoders', its LoRA slots') that no longer exist.
    """
    still_held_bytes: Annotated[StrictInt, Field(ge=0)]
    """
    Bytes of the engine's arrays that something still held after the unload (0 unless memory leaks).
    """


class HealthSamplingCount(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    value: Annotated[StrictInt, Field(ge=0)]
    """
    0 is off (every token).
    """
    origin: Literal[
        "default",
        "gguf",
        "generation_config",
        "catalog",
        "profile",
        "file",
        "env",
        "flag",
        "live",
    ]
    """
    Where a setting's value came from: `default`, its default (for the sampling settings, the APIs' own); `gguf`, the served model's GGUF file (its `general.sampling.*` keys, llama.cpp's); `generation_config`, the served safetensors model's generation_config.json; `catalog`, the served model's catalog entry (its `[model.serving]` table: a default of that model's own); `profile`, a `[profile.NAME]` table of the config file (`--profile`); `file`, the config file (`--config`); `env`, its `POOLED_*` variable; `flag`, its command-line flag; `live`, changed by `PATCH /v1/config` since the start. A model's own (`gguf`, `generation_config`, `catalog`) sit below everything the user sets, the catalog's above the file's.
    """


class HealthSamplingDefaults(BaseModel):
    """
    What a generation request's omitted sampling fields take, on every API (Chat Completions, Completions, Responses, Messages), and where each came from: a request's own value always wins. Each is a setting (`temperature` is `--temp`, `top_k` `--top-k`, `top_p` `--top-p`, `min_p` `--min-p`, `repetition_penalty` `--repeat-penalty`, as llama-server names them), so its origin is the setting's (`GET /v1/config/origins`): one the user set (`flag`, `env`, `file`, `profile`, `live`), else the served model's own recommendation (`catalog`, its catalog entry's; `gguf`, its GGUF's `general.sampling.*` keys; `generation_config`, its generation_config.json), else `default`, the APIs' own.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    temperature: HealthSamplingNumber
    top_k: HealthSamplingCount
    top_p: HealthSamplingNumber
    min_p: HealthSamplingNumber
    repetition_penalty: HealthSamplingNumber


class HealthSamplingNumber(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    value: Annotated[StrictFloat, Field(ge=0.0)]
    origin: Literal[
        "default",
        "gguf",
        "generation_config",
        "catalog",
        "profile",
        "file",
        "env",
        "flag",
        "live",
    ]
    """
    Where a setting's value came from: `default`, its default (for the sampling settings, the APIs' own); `gguf`, the served model's GGUF file (its `general.sampling.*` keys, llama.cpp's); `generation_config`, the served safetensors model's generation_config.json; `catalog`, the served model's catalog entry (its `[model.serving]` table: a default of that model's own); `profile`, a `[profile.NAME]` table of the config file (`--profile`); `file`, the config file (`--config`); `env`, its `POOLED_*` variable; `flag`, its command-line flag; `live`, changed by `PATCH /v1/config` since the start. A model's own (`gguf`, `generation_config`, `catalog`) sit below everything the user sets, the catalog's above the file's.
    """


LogitBiasAdditionalProperty = TypeAliasType(
    "LogitBiasAdditionalProperty", Annotated[StrictFloat, Field(ge=-100.0, le=100.0)]
)


class LoraAdapter(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["lora_adapter"]
    name: str
    parent: str
    """
    The id of the model it adapts (as `/v1/models` lists it).
    """
    path: str
    """
    Where its weights were read from.
    """
    rank: Annotated[StrictInt, Field(ge=1)]
    alpha: StrictFloat
    targets: list[Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]]
    """
    The projections it changes, by their Hugging Face module names.
    """
    size_bytes: Annotated[StrictInt, Field(ge=0)]
    """
    The size of its weights file.
    """
    sha256: Annotated[str, Field(pattern="^[0-9a-f]{64}$")]
    """
    The digest of its weights file (what `--lora-sha256` checks).
    """
    loaded_at: StrictInt
    """
    Unix time in seconds when it was loaded.
    """
    requests: Annotated[StrictInt, Field(ge=0)]
    """
    Requests that have run with it since it was loaded.
    """
    running: Annotated[StrictInt, Field(ge=0)]
    """
    Requests running with it now.
    """
    state: Literal["ready", "unloading"]
    """
    `unloading`: new requests naming it are refused; it goes once its running requests finish.
    """


class LoraAdapterDeleted(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["lora_adapter.deleted"]
    name: str
    deleted: Literal[True]


class LoraAdapterList(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["list"]
    data: list[LoraAdapter]
    """
    By name.
    """
    slots: Annotated[StrictInt, Field(ge=0)]
    """
    How many adapters the engine can hold at once (`--max-loras`).
    """


class LoraAdapterLoadRequest(BaseModel):
    """
    An adapter to load. Unknown fields are accepted and ignored.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    name: Annotated[str, Field(pattern="^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")]
    """
    The name requests use (`model` or `lora_adapter`); letters, digits and `._:/-`, at most 128.
    """
    path: Annotated[str, Field(min_length=1)]
    """
    A PEFT adapter directory (`adapter_config.json` + `adapter_model.safetensors`) or a llama.cpp LoRA GGUF file. It must resolve, symlinks followed, inside a `--lora-root` directory; a relative path is taken inside them.
    """


class Metrics(BaseModel):
    """
    Counters, gauges and latency histograms as JSON, named as vLLM names them (Prometheus has the same figures under `pooled_` names at `/metrics/prometheus`). `requests_running`, `requests_served_total` and `requests_rate_limited_total` (counted by the HTTP layer) are always present; the engine's fields are present once the engine runs.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    requests_running: Annotated[StrictInt, Field(ge=0)]
    """
    Model requests the HTTP layer is answering now.
    """
    requests_served_total: Annotated[StrictInt, Field(ge=0)]
    """
    Model requests answered since start, any status.
    """
    requests_rate_limited_total: Annotated[StrictInt, Field(ge=0)]
    """
    Model requests refused by `--rate-limit-rpm` (429), not counted as served.
    """
    requests_waiting: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Requests (and preempted rows) waiting for a decode lane or KV pages.
    """
    requests_refused_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Requests refused because the wait queue was full (429/529).
    """
    prompt_tokens_total: Annotated[StrictInt | None, Field(ge=0)] = None
    generation_tokens_total: Annotated[StrictInt | None, Field(ge=0)] = None
    prefix_cache_queries_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Prompt tokens looked up in the prefix cache.
    """
    prefix_cache_hits_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Prompt tokens found in the prefix cache.
    """
    prefix_cache_disk_hits_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Of the prefix cache's hits, the tokens whose pages were read back from its disk tier (`--prefix-cache-dir`: a prompt prefilled before the last restart).
    """
    draft_tokens_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Prompt-lookup draft tokens brought to decode steps (`--draft-tokens`): tokens guessed from text the row's prompt or output already holds.
    """
    draft_tokens_accepted_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Of the draft tokens, those the rows' own draws agreed with, each taken without a decode step of its own; over draft_tokens_total it is the drafts' acceptance rate.
    """
    encode_requests_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Embedding and rerank requests answered by the encoders on the engine thread; their tokens count in prompt_tokens_total and their latency in e2e_request_latency_seconds.
    """
    preemptions_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    Rows preempted (to be recomputed) when KV pages ran out.
    """
    kv_cache_usage_perc: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    """
    Fraction of KV cache pages in use, 0 to 1 (named as vLLM names it).
    """
    compiles_after_startup_total: Annotated[StrictInt | None, Field(ge=0)] = None
    """
    XLA compilations since the compile plan finished; stays 0.
    """
    time_to_first_token_seconds: MetricsHistogram | None = None
    inter_token_latency_seconds: MetricsHistogram | None = None
    e2e_request_latency_seconds: MetricsHistogram | None = None


class MetricsHistogram(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    buckets: list[MetricsHistogramBucket]
    """
    Cumulative counts, Prometheus style; the last bucket's `le` is null (+Inf).
    """
    sum: Annotated[StrictFloat, Field(ge=0.0)]
    count: Annotated[StrictInt, Field(ge=0)]


class MetricsHistogramBucket(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    le: StrictFloat | None
    count: Annotated[StrictInt, Field(ge=0)]


class ModelIdRequest(BaseModel):
    """
    A model by id. Unknown fields are accepted and ignored.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    id: Annotated[str, Field(min_length=1)]
    """
    A catalog entry's id, or a model in the models folder as `/v1/models` lists it.
    """


class ModelRemoved(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["model.removed"]
    id: str
    freed_bytes: Annotated[StrictInt, Field(ge=0)]


class NoulAnswer(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["noul"]
    noul: StrictFloat
    """
    The probability that the statement is true.
    """


class OpenAIError(BaseModel):
    """
    The error inside an OpenAI-shaped error body.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    message: str
    """
    A sentence for humans saying what went wrong.
    """
    type: str
    """
    The error class, e.g. `invalid_request_error`, `authentication_error`, `permission_error`, `not_found_error`, `rate_limit_error`, `server_error`, `engine_full`, `not_implemented`.
    """
    param: str | None
    """
    The request field the error is about, or null.
    """
    code: str | None
    """
    A machine-readable code, e.g. `context_length_exceeded`, `engine_full`, `not_implemented`, `model_not_found`, or null.
    """


class OpenAIErrorResponse(BaseModel):
    """
    The body of every error answer on the OpenAI routes, and the payload of the error chunk that ends a Chat Completions or Completions stream that fails after the 200 was sent (no `data: [DONE]` follows it).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    error: OpenAIError


class ChatCompletionStreamPayload(RootModel[ChatCompletionChunk | OpenAIErrorResponse]):
    root: ChatCompletionChunk | OpenAIErrorResponse
    """
    The JSON of one `data:` line of a Chat Completions stream: a chunk, or an error object that ends a stream failing after the 200 (no `data: [DONE]` follows an error). A stream that succeeds ends with the line `data: [DONE]`, which is not JSON.
    """


class CompletionStreamPayload(RootModel[CompletionChunk | OpenAIErrorResponse]):
    root: CompletionChunk | OpenAIErrorResponse
    """
    The JSON of one `data:` line of a Completions stream: a chunk, or an error object that ends a stream failing after the 200. A stream that succeeds ends with `data: [DONE]`, which is not JSON.
    """


class OpenAIModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `pooled/<name>`
    """
    kind: Literal["chat", "embedding", "rerank", "speech"]
    """
    Extension. What the model serves: `chat` (the generation routes), `embedding` (/v1/embeddings, and /v1/rerank by cosine similarity), `rerank` (/v1/rerank) or `speech` (/v1/audio/transcriptions and /v1/audio/translations).
    """
    object: Literal["model"]
    created: StrictInt
    """
    Unix time in seconds when the model was loaded.
    """
    owned_by: str
    max_model_len: Annotated[StrictInt, Field(ge=1)]
    """
    Extension (vLLM). The context the server runs, in tokens (an encoder's longest input, a speech model's longest text window).
    """
    decode_lanes: Annotated[StrictInt | None, Field(ge=1)] = None
    """
    Extension. How many requests (or choices) the engine decodes at once; the chat model only.
    """
    active: StrictBool | None = None
    """
    Extension. True on `data[0]`, the model being served (or loading, or switched to).
    """
    status: Literal["serving", "switching", "failed", "loading", "unloaded"] | None = None
    """
    Extension, on `data[0]` only. `failed`: the last switch's model did not load and this one serves again (see `reason`).
    """
    available: StrictBool | None = None
    """
    Extension, on a model a request could switch to. Whether this machine can serve it now.
    """
    reason: str | None = None
    """
    Extension, present only with a reason: why the last switch failed (on `data[0]`), or why a model is not available.
    """
    parent: str | None = None
    """
    Extension (vLLM). On a LoRA adapter only: the id of the model it adapts. Requests run with the adapter when their `model` names it.
    """


class OpenAIModelList(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["list"]
    data: list[OpenAIModel]
    """
    `data[0]` the served model (`active: true`, with its `status`), the speech model when it can serve (`kind: speech`), its LoRA adapters (with `parent`), the encoders served beside it, then every model a request naming it would switch to (catalog entries on disk and models in the models folder; none with `--switch-allow-implicit false`). Empty until the model is ready.
    """
    speech: SpeechAvailability
    """
    Extension. Whether the audio routes can serve, and why not.
    """


class OpenApiDocument(BaseModel):
    """
    The OpenAPI 3.1 document of this server (this spec, bundled).
    """

    model_config = ConfigDict(
        extra="allow",
    )


class PromptTokenLogprob(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    logprob: StrictFloat
    rank: Annotated[StrictInt, Field(ge=1)]
    """
    The token's place among the vocabulary at that position (1 the likeliest).
    """
    decoded_token: str


class PromptTokensDetails(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    cached_tokens: Annotated[StrictInt, Field(ge=0)]
    """
    Prompt tokens served from the prefix cache.
    """


class RerankDocument(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    text: str


class RerankDocumentParam(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    text: str


class RerankRequest(BaseModel):
    """
    A rerank request, in the vLLM/Jina/Cohere shape, served by a cross-encoder or an embedding model.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    """
    A rerank or embedding model's name from /v1/models; any other string goes to the loaded one.
    """
    query: str
    documents: list[str | RerankDocumentParam]
    """
    The documents to score against the query; strings, or objects with `text` (Cohere/Jina).
    """
    top_n: Annotated[StrictInt | None, Field(ge=1)] = None
    """
    Return only the n best results (all when absent; more than the documents is all).
    """
    return_documents: StrictBool | None = None
    """
    Include each document's text in its result (default true).
    """


class RerankResponse(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `rerank-…`
    """
    model: str
    results: list[RerankResult]
    """
    Best first.
    """
    usage: RerankUsage


class RerankResult(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    index: Annotated[StrictInt, Field(ge=0)]
    """
    The document's position in the request.
    """
    relevance_score: StrictFloat
    document: RerankDocument | None = None


class RerankUsage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    total_tokens: Annotated[StrictInt, Field(ge=0)]


class ResponseCompletedEvent(BaseModel):
    """
    Last event of a finished response: status `completed`, the full output and `usage`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.completed"]
    response: ResponseObject
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseContentPartAddedEvent(BaseModel):
    """
    A content part of a message (or reasoning) item starts, empty.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.content_part.added"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    content_index: Annotated[StrictInt, Field(ge=0)]
    part: ResponseOutputText | ResponseOutputRefusal | ResponseReasoningText
    """
    A content part as the content_part events carry it.
    """
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseContentPartDoneEvent(BaseModel):
    """
    A content part is complete.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.content_part.done"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    content_index: Annotated[StrictInt, Field(ge=0)]
    part: ResponseOutputText | ResponseOutputRefusal | ResponseReasoningText
    """
    A content part as the content_part events carry it.
    """
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseCreatedEvent(BaseModel):
    """
    First event: the response, `in_progress`, with empty output.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.created"]
    response: ResponseObject
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseCustomToolCall(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `ctc_…`
    """
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    namespace: str | None = None
    input: str
    """
    The free-form input the model produced.
    """


class ResponseCustomToolCallInputDeltaEvent(BaseModel):
    """
    A piece of a custom tool call's input.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.custom_tool_call_input.delta"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    delta: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseCustomToolCallInputDoneEvent(BaseModel):
    """
    A custom tool call's whole input.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.custom_tool_call_input.done"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    input: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseCustomToolCallOutputItem(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    type: Literal["custom_tool_call_output"]
    call_id: str
    output: str | list[ResponseInputText | ResponseInputImage | ResponseInputFile]
    status: Literal["in_progress", "completed", "incomplete"]


class ResponseDeleted(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    object: Literal["response"]
    deleted: Literal[True]


class ResponseErrorEvent(BaseModel):
    """
    An error after the 200 was sent; a `response.failed` event follows it.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["error"]
    code: str | None
    message: str
    param: str | None
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseErrorInfo(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    code: str
    """
    e.g. `server_error`, `rate_limit_exceeded`, `invalid_prompt`.
    """
    message: str


class ResponseFailedEvent(BaseModel):
    """
    Last event of a response that failed after the 200: status `failed`, with `error`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.failed"]
    response: ResponseObject
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseFunctionCallArgumentsDeltaEvent(BaseModel):
    """
    A piece of a function call's arguments.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.function_call_arguments.delta"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    delta: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseFunctionCallArgumentsDoneEvent(BaseModel):
    """
    A function call's whole arguments.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.function_call_arguments.done"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    name: str
    arguments: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseFunctionCallOutputItem(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ResponseInputText | ResponseInputImage | ResponseInputFile]
    status: Literal["in_progress", "completed", "incomplete"]


class ResponseFunctionToolCall(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `fc_…`
    """
    type: Literal["function_call"]
    call_id: str
    """
    `call_…`; a `function_call_output` item answers it.
    """
    name: str
    namespace: str | None = None
    """
    The `namespace` tool the function belongs to, when it came from one.
    """
    arguments: str
    """
    The arguments as a JSON string.
    """
    status: Literal["in_progress", "completed", "incomplete"]


class ResponseInProgressEvent(BaseModel):
    """
    Second event: the same response.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.in_progress"]
    response: ResponseObject
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseIncompleteDetails(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseIncompleteEvent(BaseModel):
    """
    Last event of a response cut short (max_output_tokens or the context): status `incomplete`, with `incomplete_details` and `usage`.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.incomplete"]
    response: ResponseObject
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseInputContentParam(BaseModel):
    """
    One content part: `input_text`, `input_image`, `input_file`, `output_text` and `refusal` (on assistant messages sent back), `reasoning_text` and `summary_text` (in reasoning items sent back).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    text: str | None = None
    refusal: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    detail: str | None = None
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class ResponseInputFile(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class ResponseInputImage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["input_image"]
    image_url: str | None
    file_id: str | None
    detail: Literal["low", "high", "auto", "original"]


class ResponseInputItemList(BaseModel):
    """
    A page of a stored response's input items: everything the model saw before its output, so with `previous_response_id` the earlier turns' inputs and outputs come first. `instructions` are not items.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["list"]
    data: list[
        ResponseInputMessageItem
        | ResponseOutputMessage
        | ResponseFunctionToolCall
        | ResponseFunctionCallOutputItem
        | ResponseCustomToolCall
        | ResponseCustomToolCallOutputItem
        | ResponseReasoningItem
    ]
    first_id: str | None
    """
    The first item's id; null when `data` is empty.
    """
    last_id: str | None
    """
    The last item's id; null when `data` is empty.
    """
    has_more: StrictBool


class ResponseInputItemParam(BaseModel):
    """
    One input item. One loose schema for every item type, since clients vary: messages with or without `type`/`id`/`status` (roles `user`, `assistant`, `system`, `developer`; content a string or a list of parts), and items the server sent earlier echoed back (`function_call`, `function_call_output`, `custom_tool_call`, `custom_tool_call_output`, `reasoning`). An item without `type` is a message. A reasoning item becomes the reasoning of the assistant turn after it. Other item types (`item_reference`, hosted tool calls such as `web_search_call`) are accepted and left out of the prompt.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str | None = None
    """
    `message` when absent.
    """
    id: str | None = None
    status: str | None = None
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[ResponseInputContentParam] | None = None
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    arguments: str | None = None
    input: str | None = None
    """
    A `custom_tool_call`'s free-form input.
    """
    output: str | list[ResponseInputContentParam] | None = None
    """
    A `function_call_output` or `custom_tool_call_output`'s output.
    """
    summary: list[ResponseInputContentParam] | None = None
    """
    A `reasoning` item's summary parts.
    """
    encrypted_content: str | None = None


class ResponseInputMessageItem(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    type: Literal["message"]
    role: Literal["user", "system", "developer"]
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[ResponseInputText | ResponseInputImage | ResponseInputFile]


class ResponseInputText(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["input_text"]
    text: str


class ResponseInputTokens(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    object: Literal["response.input_tokens"]
    input_tokens: Annotated[StrictInt, Field(ge=0)]


class ResponseInputTokensDetails(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    cached_tokens: Annotated[StrictInt, Field(ge=0)]
    """
    Input tokens served from the prefix cache.
    """
    cache_write_tokens: Annotated[StrictInt, Field(ge=0)]
    """
    Always 0 (the strict SDK types need the field).
    """


class ResponseInputTokensRequest(BaseModel):
    """
    The parts of a Responses request that make up the prompt; counts its tokens without generating.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    input: str | list[ResponseInputItemParam] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[ResponseToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | ResponseToolChoiceObjectParam | None = None
    """
    `none`, `auto` or `required`, or an object naming one tool (`{"type": "function", "name": …}`, `{"type": "custom", "name": …}`, `{"type": "allowed_tools", …}`).
    """
    parallel_tool_calls: StrictBool | None = None
    reasoning: ResponseReasoningParam | None = None
    text: ResponseTextParam | None = None
    truncation: str | None = None
    conversation: str | dict[str, Any] | None = None


class ResponseLogprob(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    token: str
    logprob: StrictFloat
    bytes: list[StrictInt]
    top_logprobs: list[ResponseTopLogprob]


class ResponseNamespaceMemberParam(BaseModel):
    """
    A tool inside a `namespace` tool (not nested further).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str | None = None
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None
    format: dict[str, Any] | None = None


class ResponseObject(BaseModel):
    """
    A model response (OpenAI's `Response`), as answered, streamed in lifecycle events, and stored.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `resp_…`
    """
    object: Literal["response"]
    created_at: StrictInt
    """
    Unix time in seconds.
    """
    completed_at: StrictInt | None = None
    status: Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
    error: ResponseErrorInfo | None
    incomplete_details: ResponseIncompleteDetails | None
    instructions: str | None
    max_output_tokens: StrictInt | None = None
    max_tool_calls: StrictInt | None = None
    model: str
    """
    The served model's id, or the name of the LoRA adapter the request ran with.
    """
    output: list[ResponseOutputMessage | ResponseFunctionToolCall | ResponseCustomToolCall | ResponseReasoningItem]
    parallel_tool_calls: StrictBool
    previous_response_id: str | None = None
    reasoning: ResponseReasoningConfig | None = None
    temperature: StrictFloat | None
    top_p: StrictFloat | None
    top_logprobs: StrictInt | None = None
    text: ResponseTextConfig | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any]
    """
    The request's `tool_choice`, as given (`auto` by default).
    """
    tools: list[dict[str, Any]]
    """
    The request's tools, as given.
    """
    truncation: str | None = None
    usage: ResponseUsage | None = None
    """
    Token counts; absent until the response is finished.
    """
    user: str | None = None
    """
    The request's `user`; absent when it sent none.
    """
    metadata: dict[str, str] | None
    background: StrictBool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None


class ResponseOutputItemAddedEvent(BaseModel):
    """
    An output item starts (status `in_progress`, empty content).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.output_item.added"]
    output_index: Annotated[StrictInt, Field(ge=0)]
    item: ResponseOutputMessage | ResponseFunctionToolCall | ResponseCustomToolCall | ResponseReasoningItem
    """
    One item of a response's output.
    """
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseOutputItemDoneEvent(BaseModel):
    """
    An output item is complete.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.output_item.done"]
    output_index: Annotated[StrictInt, Field(ge=0)]
    item: ResponseOutputMessage | ResponseFunctionToolCall | ResponseCustomToolCall | ResponseReasoningItem
    """
    One item of a response's output.
    """
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseOutputMessage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `msg_…`
    """
    type: Literal["message"]
    role: Literal["assistant"]
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[ResponseOutputText | ResponseOutputRefusal]


class ResponseOutputRefusal(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["refusal"]
    refusal: str


class ResponseOutputText(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]]
    """
    Always empty.
    """
    logprobs: list[ResponseLogprob]
    """
    Empty unless `top_logprobs` (or `include` of `message.output_text.logprobs`) asked for them.
    """


class ResponseOutputTextDeltaEvent(BaseModel):
    """
    A piece of output text.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.output_text.delta"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    content_index: Annotated[StrictInt, Field(ge=0)]
    delta: str
    logprobs: list[ResponseLogprob]
    """
    Empty unless logprobs were asked for.
    """
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseOutputTextDoneEvent(BaseModel):
    """
    The whole output text of a part.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.output_text.done"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    content_index: Annotated[StrictInt, Field(ge=0)]
    text: str
    logprobs: list[ResponseLogprob]
    """
    Empty unless logprobs were asked for.
    """
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseOutputTokensDetails(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    reasoning_tokens: Annotated[StrictInt, Field(ge=0)]


class ResponseReasoningConfig(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    effort: str | None
    summary: str | None


class ResponseReasoningItem(BaseModel):
    """
    The model's reasoning (thinking) text, as `content` parts; `summary` is empty (no summariser).
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    id: str
    """
    `rs_…`
    """
    type: Literal["reasoning"]
    summary: list[ResponseSummaryText]
    content: list[ResponseReasoningText] | None = None
    encrypted_content: str | None
    """
    Always null.
    """
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class ResponseReasoningParam(BaseModel):
    """
    `effort` `none` turns thinking off where the chat template can; `summary` is accepted (reasoning comes back as `reasoning_text`, not summarised).
    """

    model_config = ConfigDict(
        extra="allow",
    )
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class ResponseReasoningSummaryPartAddedEvent(BaseModel):
    """
    A reasoning summary part starts.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.reasoning_summary_part.added"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    summary_index: Annotated[StrictInt, Field(ge=0)]
    part: ResponseSummaryText
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseReasoningSummaryPartDoneEvent(BaseModel):
    """
    A reasoning summary part is complete.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.reasoning_summary_part.done"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    summary_index: Annotated[StrictInt, Field(ge=0)]
    part: ResponseSummaryText
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseReasoningSummaryTextDeltaEvent(BaseModel):
    """
    A piece of reasoning summary text.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.reasoning_summary_text.delta"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    summary_index: Annotated[StrictInt, Field(ge=0)]
    delta: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseReasoningSummaryTextDoneEvent(BaseModel):
    """
    The whole text of a reasoning summary part.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.reasoning_summary_text.done"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    summary_index: Annotated[StrictInt, Field(ge=0)]
    text: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseReasoningText(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["reasoning_text"]
    text: str


class ResponseReasoningTextDeltaEvent(BaseModel):
    """
    A piece of reasoning text.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.reasoning_text.delta"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    content_index: Annotated[StrictInt, Field(ge=0)]
    delta: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseReasoningTextDoneEvent(BaseModel):
    """
    The whole reasoning text of a part.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.reasoning_text.done"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    content_index: Annotated[StrictInt, Field(ge=0)]
    text: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseRefusalDeltaEvent(BaseModel):
    """
    A piece of refusal text.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.refusal.delta"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    content_index: Annotated[StrictInt, Field(ge=0)]
    delta: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseRefusalDoneEvent(BaseModel):
    """
    The whole refusal text.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["response.refusal.done"]
    item_id: str
    output_index: Annotated[StrictInt, Field(ge=0)]
    content_index: Annotated[StrictInt, Field(ge=0)]
    refusal: str
    sequence_number: Annotated[StrictInt, Field(ge=0)]
    """
    The event's position in the stream, from 0.
    """


class ResponseStreamEvent(BaseModel):
    """
    One server-sent event of a Responses stream (OpenAPI 3.1 describes `text/event-stream` by its events): an `event:` line naming the payload's `type`, and a `data:` line holding the payload (ResponseStreamPayload). A text answer streams created, in_progress, output_item.added, content_part.added, output_text.delta…, output_text.done, content_part.done, output_item.done, then completed (or incomplete); no `data: [DONE]` follows. Comment lines (`: keep-alive`) come every 10 s while the stream waits.
    """

    event: str
    data: Annotated[
        str,
        Field(
            json_schema_extra={
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": "#/components/schemas/ResponseStreamPayload"},
            }
        ),
    ]


class ResponseStreamOptionsParam(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    include_obfuscation: StrictBool | None = None
    """
    Accepted and ignored (pooled never pads events).
    """


class ResponseStreamPayload(
    RootModel[
        ResponseCreatedEvent
        | ResponseInProgressEvent
        | ResponseCompletedEvent
        | ResponseIncompleteEvent
        | ResponseFailedEvent
        | ResponseOutputItemAddedEvent
        | ResponseOutputItemDoneEvent
        | ResponseContentPartAddedEvent
        | ResponseContentPartDoneEvent
        | ResponseOutputTextDeltaEvent
        | ResponseOutputTextDoneEvent
        | ResponseRefusalDeltaEvent
        | ResponseRefusalDoneEvent
        | ResponseFunctionCallArgumentsDeltaEvent
        | ResponseFunctionCallArgumentsDoneEvent
        | ResponseCustomToolCallInputDeltaEvent
        | ResponseCustomToolCallInputDoneEvent
        | ResponseReasoningTextDeltaEvent
        | ResponseReasoningTextDoneEvent
        | ResponseReasoningSummaryPartAddedEvent
        | ResponseReasoningSummaryPartDoneEvent
        | ResponseReasoningSummaryTextDeltaEvent
        | ResponseReasoningSummaryTextDoneEvent
        | ResponseErrorEvent
    ]
):
    root: (
        ResponseCreatedEvent
        | ResponseInProgressEvent
        | ResponseCompletedEvent
        | ResponseIncompleteEvent
        | ResponseFailedEvent
        | ResponseOutputItemAddedEvent
        | ResponseOutputItemDoneEvent
        | ResponseContentPartAddedEvent
        | ResponseContentPartDoneEvent
        | ResponseOutputTextDeltaEvent
        | ResponseOutputTextDoneEvent
        | ResponseRefusalDeltaEvent
        | ResponseRefusalDoneEvent
        | ResponseFunctionCallArgumentsDeltaEvent
        | ResponseFunctionCallArgumentsDoneEvent
        | ResponseCustomToolCallInputDeltaEvent
        | ResponseCustomToolCallInputDoneEvent
        | ResponseReasoningTextDeltaEvent
        | ResponseReasoningTextDoneEvent
        | ResponseReasoningSummaryPartAddedEvent
        | ResponseReasoningSummaryPartDoneEvent
        | ResponseReasoningSummaryTextDeltaEvent
        | ResponseReasoningSummaryTextDoneEvent
        | ResponseErrorEvent
    )
    """
    The JSON of one `data:` line of a Responses stream; `sequence_number` counts the events from 0. An error after the 200 is an `error` event followed by `response.failed`, the last event.
    """


class ResponseSummaryText(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["summary_text"]
    text: str


class ResponseTextConfig(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    format: ResponseTextFormat
    verbosity: str | None = None


class ResponseTextFormat(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    strict: StrictBool | None = None


class ResponseTextFormatParam(BaseModel):
    """
    `{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "name", "schema", "strict"}`; JSON output is constrained on the device.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    strict: StrictBool | None = None


class ResponseTextParam(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    format: ResponseTextFormatParam | None = None
    verbosity: str | None = None


class ResponseToolChoiceObjectParam(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    name: str | None = None
    mode: str | None = None
    tools: list[dict[str, Any]] | None = None


class ResponseToolParam(BaseModel):
    """
    A tool. `function` and `custom` (free-form input, e.g. Codex's `apply_patch` with a grammar format) are served: a custom tool is offered to the model as a function with one string argument, `input`, and a `tool_choice` naming it makes the whole answer its input, generated under its Lark or regex grammar. `namespace` groups function tools, which are offered under their own names (a call to one carries its `namespace`). Other types (`web_search`, `tool_search`, …) name tools the server cannot run: they are accepted and not offered to the model.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None
    format: dict[str, Any] | None = None
    tools: list[ResponseNamespaceMemberParam] | None = None
    """
    A `namespace` tool's member tools.
    """


class ResponseTopLogprob(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    token: str
    logprob: StrictFloat
    bytes: list[StrictInt]


class ResponseUsage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    input_tokens: Annotated[StrictInt, Field(ge=0)]
    input_tokens_details: ResponseInputTokensDetails
    output_tokens: Annotated[StrictInt, Field(ge=0)]
    output_tokens_details: ResponseOutputTokensDetails
    total_tokens: Annotated[StrictInt, Field(ge=0)]


class ScoreAnswer(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["score"]
    score: StrictFloat
    """
    The expected level index, Σ i·p_i.
    """
    legend: dict[str, str]
    """
    Each level's description, keyed by its index.
    """
    probabilities: dict[str, StrictFloat]
    """
    Each level's probability, keyed by its index.
    """
    confidence: StrictFloat
    """
    max(0, 1 − E|i − mode| / D), D the mean distance of the levels from their middle.
    """


class SpeechAvailability(BaseModel):
    """
    Extension. Whether the audio routes (/v1/audio/transcriptions, /v1/audio/translations) can serve, and why not: no `--speech-model` given, or it did not load (the reason), or the model is not ready.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    available: StrictBool
    reason: str | None = None
    """
    Present only when not available.
    """


class StreamOptions(BaseModel):
    """
    Options for a streamed answer; only with `stream` true.
    """

    model_config = ConfigDict(
        extra="allow",
    )
    include_usage: StrictBool | None = None
    """
    Send one more chunk before `data: [DONE]` with the request's `usage` and no choices; every other chunk has `usage` null (unless `continuous_usage_stats`).
    """
    include_obfuscation: StrictBool | None = None
    """
    Accepted and ignored (pooled never pads chunks).
    """
    continuous_usage_stats: StrictBool | None = None
    """
    Extension (vLLM). With `include_usage`, every other chunk carries `usage` too, counted so far (UsageSoFar: the prompt's tokens and the tokens of the chunk's choice up to this chunk). Without `include_usage` it adds nothing, as in vLLM.
    """


class TokenizeChatRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    messages: list[ChatMessage]
    add_generation_prompt: StrictBool | None = True
    """
    End with the template's opening of an assistant turn.
    """
    continue_final_message: StrictBool | None = False
    """
    Leave the last (assistant) message open, to be continued. Not served yet; true is a 400.
    """
    add_special_tokens: StrictBool | None = False
    """
    Add special tokens on top of the template's (the template usually has them).
    """
    tools: list[ChatTool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: StrictBool | None = None


class TokenizeCompletionRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
    )
    model: str | None = None
    prompt: str
    add_special_tokens: StrictBool | None = True
    """
    Add the tokenizer's special tokens (e.g. BOS).
    """
    return_token_strs: StrictBool | None = None
    """
    Also return each token's text.
    """


class TokenizeRequest(RootModel[TokenizeCompletionRequest | TokenizeChatRequest]):
    root: TokenizeCompletionRequest | TokenizeChatRequest
    """
    Either a prompt to tokenize as is, or chat messages to render with the chat template first.
    """


class TokenizeResponse(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    count: Annotated[StrictInt, Field(ge=0)]
    max_model_len: Annotated[StrictInt, Field(ge=1)]
    """
    The context the server runs, in tokens.
    """
    tokens: list[StrictInt]
    token_strs: list[str] | None = None


class TokenizerInfoResponse(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    tokenizer_class: str
    """
    The tokenizer's kind (pooled runs Hugging Face `tokenizers` backends).
    """
    bos_token: str | None
    eos_token: str | None
    """
    The end token (its text; `/tokenize` gives its id).
    """
    pad_token: str | None
    chat_template: str | None
    """
    The Jinja chat template the server renders chats with.
    """
    model_max_length: Annotated[StrictInt, Field(ge=1)]
    """
    The context the server runs, in tokens.
    """


class TranscriptTextDeltaEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["transcript.text.delta"]
    delta: str
    """
    The text of the segment just decoded.
    """
    logprobs: list[TranscriptionLogprob] | None = None
    """
    With `include[]=logprobs`, the delta's tokens.
    """


class TranscriptTextDoneEvent(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["transcript.text.done"]
    text: str
    logprobs: list[TranscriptionLogprob] | None = None
    """
    With `include[]=logprobs`, every token of the text.
    """
    usage: TranscriptionTokenUsage


class Transcription(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    text: str
    logprobs: list[TranscriptionLogprob] | None = None
    """
    With `include[]=logprobs`, each token of the text.
    """
    usage: TranscriptionTokenUsage


class TranscriptionDurationUsage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["duration"]
    seconds: StrictFloat
    """
    Seconds of audio.
    """


class TranscriptionForm(BaseModel):
    """
    The transcription request's `multipart/form-data` fields.
    """

    file: bytes
    """
    The audio file: wav, mp3, flac, ogg/opus, webm or m4a/mp4, at most `--max-audio-bytes` bytes and `--max-audio-seconds` long.
    """
    model: Annotated[str | None, Field(examples=["whisper-1"])] = None
    """
    Any id; the speech model (`--speech-model`) answers.
    """
    language: Annotated[str | None, Field(examples=["en"])] = None
    """
    The audio's language as an ISO-639-1 code (`en`); without it, the model detects it from the first 30 seconds.
    """
    prompt: Annotated[str | None, Field(examples=[""])] = None
    """
    Text the speech is taken to follow (its spelling, names, style), as Whisper's previous text.
    """
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt"] | None = "json"
    """
    `json`: `{text, usage}`; `verbose_json`: the language, duration, segments and words; `text`: the text alone; `srt`, `vtt`: SubRip or WebVTT subtitles, one cue a segment (all three as `text/plain`).
    """
    temperature: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    """
    Above 0: decode at this temperature alone. 0 or absent (as OpenAI documents 0): each window is decoded greedily and falls back through 0.2 … 1.0 while its decode fails Whisper's thresholds.
    """
    timestamp_granularities: list[Literal["word", "segment"]] | None = None
    """
    With `verbose_json`: `segment` (always given) and `word` (each word's timing, from the model's cross-attention). Sent as `timestamp_granularities[]` by the OpenAI SDKs; both names are read.
    """
    include: list[Literal["logprobs"]] | None = None
    """
    `logprobs`: each token's log probability, with `json` and with `stream`.
    """
    stream: StrictBool | None = False
    """
    Server-sent events, a `transcript.text.delta` a segment, then `transcript.text.done`.
    """


class TranscriptionLogprob(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    token: str
    logprob: StrictFloat
    bytes: list[StrictInt]
    """
    The token's text as UTF-8 bytes.
    """


class TranscriptionSegment(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    id: StrictInt
    seek: StrictInt
    """
    Where the 30-second window it was decoded in starts, in 10 ms frames (Whisper's seek).
    """
    start: StrictFloat
    end: StrictFloat
    text: str
    tokens: list[StrictInt]
    """
    The speech model's token ids of its text.
    """
    temperature: StrictFloat
    """
    The temperature its window was decoded at.
    """
    avg_logprob: StrictFloat
    compression_ratio: StrictFloat
    no_speech_prob: StrictFloat


class TranscriptionStreamEvent(BaseModel):
    """
    One server-sent event of a transcription stream: a `data:` line (TranscriptionStreamPayload). Comment lines (`: keep-alive`) come every 10 s while the stream waits.
    """

    data: Annotated[
        str,
        Field(
            json_schema_extra={
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": "#/components/schemas/TranscriptionStreamPayload"},
            }
        ),
    ]


class TranscriptionStreamPayload(RootModel[TranscriptTextDeltaEvent | TranscriptTextDoneEvent | OpenAIErrorResponse]):
    root: TranscriptTextDeltaEvent | TranscriptTextDoneEvent | OpenAIErrorResponse
    """
    The JSON of one `data:` line of a transcription stream: a delta, the closing done event, or an error object that ends a stream failing after the 200.
    """


class TranscriptionTokenDetails(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    text_tokens: StrictInt
    """
    The prompt's tokens.
    """
    audio_tokens: StrictInt
    """
    The audio encoder's positions the audio took (50 a second).
    """


class TranscriptionTokenUsage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    type: Literal["tokens"]
    input_tokens: StrictInt
    input_token_details: TranscriptionTokenDetails
    output_tokens: StrictInt
    """
    The text tokens decoded, in the segments kept.
    """
    total_tokens: StrictInt


class TranscriptionVerbose(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    task: Literal["transcribe"]
    """
    Extension (whisper-1 sends it). Always `transcribe`.
    """
    language: str
    """
    The language asked for or detected, as the model's code (`en`).
    """
    duration: StrictFloat
    """
    Seconds of audio.
    """
    text: str
    segments: list[TranscriptionSegment]
    words: list[TranscriptionWord] | None = None
    """
    With `timestamp_granularities[]=word`.
    """
    usage: TranscriptionDurationUsage


class TranscriptionWord(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    word: str
    start: StrictFloat
    end: StrictFloat


class Translation(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    text: str


class TranslationForm(BaseModel):
    """
    The translation request's `multipart/form-data` fields.
    """

    file: bytes
    """
    The audio file, as for a transcription.
    """
    model: Annotated[str | None, Field(examples=["whisper-1"])] = None
    """
    Any id; the speech model (`--speech-model`) answers.
    """
    prompt: Annotated[str | None, Field(examples=[""])] = None
    """
    English text the speech is taken to follow.
    """
    response_format: Literal["json", "text", "srt", "verbose_json", "vtt"] | None = "json"
    """
    `json`: `{text, usage}`; `verbose_json`: the language, duration, segments and words; `text`: the text alone; `srt`, `vtt`: SubRip or WebVTT subtitles, one cue a segment (all three as `text/plain`).
    """
    temperature: Annotated[StrictFloat | None, Field(ge=0.0, le=1.0)] = None
    """
    As for a transcription.
    """


class TranslationVerbose(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    task: Literal["translate"]
    """
    Extension (whisper-1 sends it). Always `translate`.
    """
    language: str
    """
    The language of the text, always `en`.
    """
    duration: StrictFloat
    """
    Seconds of audio.
    """
    text: str
    segments: list[TranscriptionSegment]


class UsageSoFar(BaseModel):
    """
    A chunk's counts under `stream_options.continuous_usage_stats` (vLLM's shape): the tokens of the prompt its choice answers, and the tokens that choice has generated up to and including this chunk.
    """

    model_config = ConfigDict(
        extra="forbid",
    )
    prompt_tokens: Annotated[StrictInt, Field(ge=0)]
    completion_tokens: Annotated[StrictInt, Field(ge=0)]
    total_tokens: Annotated[StrictInt, Field(ge=0)]
