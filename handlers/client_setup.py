"""Ready-made settings that point Claude Code, Codex and opencode at this server.

The banner (`GET /`, and what `pooled serve` prints once the model is ready) shows them with the
server's own address and model id filled in; docs/connect-your-tools.md explains each.
"""

from __future__ import annotations

import json


def claude_code(origin: str, model_id: str) -> str:
    """Claude Code speaks the Messages API; the auth token goes out as `Authorization: Bearer`."""
    return "\n".join(
        [
            f"export ANTHROPIC_BASE_URL={origin}",
            "export ANTHROPIC_AUTH_TOKEN=pooled   # the --api-key token, if the server has one",
            f"export ANTHROPIC_MODEL={model_id}",
            f"export ANTHROPIC_DEFAULT_HAIKU_MODEL={model_id}",
            "export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
            "claude",
        ]
    )


def codex(origin: str, model_id: str) -> str:
    """Codex speaks only the Responses API (`wire_api = "responses"`), in ~/.codex/config.toml."""
    return "\n".join(
        [
            f'model = "{model_id}"',
            'model_provider = "pooled"',
            "",
            "[model_providers.pooled]",
            'name = "pooled"',
            f'base_url = "{origin}/v1"',
            'wire_api = "responses"',
            '# env_key = "POOLED_API_KEY"   # with --api-key: the variable holding the token',
        ]
    )


def opencode(origin: str, model_id: str) -> str:
    """An opencode.json provider over Chat Completions (`@ai-sdk/openai-compatible`)."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "pooled": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "pooled",
                "options": {"baseURL": f"{origin}/v1", "apiKey": "pooled"},
                "models": {model_id: {"name": model_id}},
            }
        },
        "model": f"pooled/{model_id}",
        "small_model": f"pooled/{model_id}",
    }
    return json.dumps(config, indent=2)


def client_settings(origin: str, model_id: str) -> str:
    sections = [
        ("Claude Code (shell)", claude_code(origin, model_id)),
        ("Codex (~/.codex/config.toml)", codex(origin, model_id)),
        ("opencode (opencode.json)", opencode(origin, model_id)),
    ]
    return "\n\n".join(f"{title}:\n" + _indent(body) for title, body in sections)


def _indent(text: str) -> str:
    return "\n".join("    " + line if line else "" for line in text.splitlines())
