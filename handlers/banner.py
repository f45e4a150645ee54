"""`GET /`: the banner, as plain text: where to point each kind of client."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import PlainTextResponse, Response

from handlers.client_setup import client_settings
from handlers.context import ModelService, ServerContext, context
from handlers.sampling_defaults import sampling_defaults


def context_line(model: ModelService) -> str:
    """The served context, and whether RoPE scaling stretches it past what the model was trained on."""
    line = f"Context: {model.ctx} tokens"
    if model.rope_scaling is not None:
        line += f", extended from the trained {model.trained_ctx} with {model.rope_scaling} RoPE scaling"
        line += " (quality may drop past it; --ctx sets it)"
    return line


def weights_line(model: ModelService) -> str:
    weights = WEIGHTS[model.quantization or "none"]
    if model.weight_formats:
        weights += ": " + ", ".join(f"{format} ×{count}" for format, count in model.weight_formats.items())
    return f"Weights: {weights} (--quantization sets it)"


WEIGHTS = {
    "none": "float, as --dtype says",
    "gguf": "the file's own blocks on native CPU kernels (gguf)",
    "w8a8": "int8 projections and head (w8a8)",
    "w4a8": "the file's Q4_1 blocks on the native CPU kernel, activations in int8 (w4a8)",
}


def banner(server: ServerContext) -> str:
    origin = f"http://127.0.0.1:{server.port}"
    model = server.model
    status = {
        "loading": "loading (requests get 503 with Retry-After: 5 until it is ready)",
        "serving": "ready",
        "unloaded": "unloaded after an idle spell (the next request loads it again)",
        "switching": "switching models (requests get 503 with Retry-After: 5 until the new one is ready)",
        "draining": "draining: finishing requests in flight, refusing new ones",
        "dead": "stopped: " + ": ".join(model.failure or ("unknown", "")),
    }[model.state]
    chat = model.kind == "chat"
    lines = [f"pooled serving {model.model_id} — {status}", ""]
    if chat:
        lines += [
            f"  OpenAI base URL     {origin}/v1        (Chat Completions, Completions, Responses)",
            f"  Anthropic base URL  {origin}           (Messages)",
        ]
    else:
        routes = "Transcriptions, Translations" if model.kind == "speech" else "Embeddings, Rerank"
        lines += [f"  OpenAI base URL     {origin}/v1        ({routes})"]
    lines += [f"  API reference       {origin}/v1/docs/", f"  Health              {origin}/health", ""]
    if chat:
        lines += [
            "Any model name is accepted and served by the loaded model.",
            f"Try: curl {origin}/v1/chat/completions -H 'content-type: application/json' \\",
            """       -d '{"model": "pooled", "messages": [{"role": "user", "content": "Hi"}]}'""",
        ]
    else:
        lines += [
            f"Try: curl {origin}/v1/embeddings -H 'content-type: application/json' \\",
            """       -d '{"model": "pooled", "input": ["Hi"]}'""",
        ]
    if model.state == "serving":
        lines += ["", *encoder_lines(model, origin)]
    if model.state == "serving" and chat:
        lines += ["", context_line(model), weights_line(model), *sampling_lines(server), *model_defaults_lines(server)]
        lines += ["", "Connect your tools (docs/connect-your-tools.md):"]
        lines += ["", client_settings(origin, model.model_id)]
    return "\n".join(lines) + "\n"


# Where a sampling default came from, in the banner's words.
ORIGIN_WORDS = {
    "default": "API default",
    "gguf": "the GGUF's",
    "generation_config": "generation_config.json",
    "catalog": "catalog",
    "profile": "config profile",
    "file": "config file",
    "env": "POOLED_* variable",
    "flag": "flag",
    "live": "set live",
}


def sampling_lines(server: ServerContext) -> list[str]:
    """The sampling a request that names none gets, and where each value came from."""
    shown = ", ".join(
        f"{default.field} {default.value:g} ({ORIGIN_WORDS[default.origin]})" for default in sampling_defaults(server)
    )
    return [
        f"Sampling defaults: {shown}",
        "  for requests that name none; --temp, --top-k, --top-p, --min-p and --repeat-penalty set them.",
    ]


def model_defaults_lines(server: ServerContext) -> list[str]:
    """The settings in force from the served model's catalog entry, and why it sets them."""
    config = server.config
    if config is None:
        return []
    origins = config.origins()
    from_catalog = [name for name, origin in origins.items() if origin.origin == "catalog"]
    if not from_catalog:
        return []
    values, flags = config.values(), {field.name: field.flag for field in config.fields()}
    shown = ", ".join(f"{flags[name]} {_flag_value(values[name])}" for name in from_catalog)
    origin = origins[from_catalog[0]]
    return [
        f"Defaults of the catalog's {origin.catalog}: {shown}",
        f"  ({origin.reason}); a flag, a POOLED_* variable or the --config file overrides them.",
    ]


def _flag_value(value: object) -> str:
    """A setting's JSON value as its flag takes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def encoder_lines(model: ModelService, origin: str) -> list[str]:
    """The encoders served and their routes, those that did not load, or how to serve one beside
    the chat model."""
    failed = [
        f"{part.setting.replace('_', ' ').capitalize()} {part.path} did not load ({part.reason}): "
        f"its routes answer 503."
        for part in model.failed_parts
    ]
    if not model.encoders and model.speech is None and not failed:
        return [
            "Embeddings and rerank: start with --embedding-model DIR or --rerank-model DIR (sentence-transformers),",
            "or --embeddings true to embed with the chat model.",
        ]
    routes = {"embedding": f"{origin}/v1/embeddings (and /v1/rerank by cosine)", "rerank": f"{origin}/v1/rerank"}
    served = [
        f"{'Embeddings' if encoder.kind == 'embedding' else 'Rerank'}: {name} at {routes[encoder.kind]}"
        for name, encoder in model.encoders.items()
    ]
    if model.speech is not None:
        served.append(f"Speech to text: {model.speech.name} at {origin}/v1/audio/transcriptions (and /translations)")
    return served + failed


async def get_banner(request: Request) -> Response:
    return PlainTextResponse(banner(context(request)))
