"""The generation layer every API shares: one module per job.

- `engine_bridge`: submit to the engine, await its events, cancel, map its errors to statuses.
- `prompt`: messages and tools → the chat template → prompt ids.
- `sampling`: request fields → `SamplingParams`, the output budget, the checks before the engine.
- `stop_strings`, `reasoning`, `tool_calls`: incremental parsers of the generated text.
- `text_output`: one row's pipeline through those parsers; `rows`: a generation's rows and usage.
- `constraints`: guided decoding (JSON schema, regex, choice, Lark, forced tool calls) via llguidance.
- `sse`: server-sent event framing and keep-alive.

Each API package (`handlers/openai_chat`, `handlers/openai_completions`, …) converts its request
to these pieces and shapes the pieces back into its answer or stream.
"""
