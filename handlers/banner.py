"""`GET /`: the banner, as plain text: where to point each kind of client."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import PlainTextResponse, Response

from handlers.client_setup import client_settings
from handlers.context import ModelService, ServerContext, context


def context_line(model: ModelService) -> str:
    """The served context, and whether RoPE scaling stretches it past what the model was trained on."""
    line = f"Context: {model.ctx} tokens"
    if model.rope_scaling is not None:
        line += f", extended from the trained {model.trained_ctx} with {model.rope_scaling} RoPE scaling"
        line += " (quality may drop past it; --ctx sets it)"
    return line


def weights_line(model: ModelService) -> str:
    return f"Weights: {WEIGHTS[model.quantization or 'none']} (--quantization sets it)"


WEIGHTS = {
    "none": "float, as --dtype says",
    "w8a8": "int8 projections and head (w8a8)",
    "w4a8": "the file's Q4_1 blocks on the native CPU kernel, activations in int8 (w4a8)",
}


def banner(server: ServerContext) -> str:
    origin = f"http://127.0.0.1:{server.port}"
    model = server.model
    status = {
        "loading": "loading (requests get 503 with Retry-After: 5 until it is ready)",
        "serving": "ready",
        "draining": "draining: finishing requests in flight, refusing new ones",
        "dead": "stopped: " + ": ".join(model.failure or ("unknown", "")),
    }[model.state]
    lines = [
        f"pooled serving {model.model_id} — {status}",
        "",
        f"  OpenAI base URL     {origin}/v1        (Chat Completions, Completions, Responses)",
        f"  Anthropic base URL  {origin}           (Messages)",
        f"  API reference       {origin}/v1/docs/",
        f"  Health              {origin}/health",
        "",
        "Any model name is accepted and served by the loaded model.",
        f"Try: curl {origin}/v1/chat/completions -H 'content-type: application/json' \\",
        """       -d '{"model": "pooled", "messages": [{"role": "user", "content": "Hi"}]}'""",
    ]
    if model.state == "serving":
        lines += ["", context_line(model), weights_line(model), "", "Connect your tools (docs/connect-your-tools.md):"]
        lines += ["", client_settings(origin, model.model_id)]
    return "\n".join(lines) + "\n"


async def get_banner(request: Request) -> Response:
    return PlainTextResponse(banner(context(request)))
