"""The context `pooled serve` runs: `--ctx` when given, else long enough for coding agents.

An agent's first request carries its tools and system prompt: ~21k tokens of the default model
for Claude Code, ~9.5k for Codex, ~7k for opencode. A checkpoint trained on less than
`AGENT_CONTEXT` is extended to it with RoPE scaling (`--rope-scaling`, else the checkpoint's own
kind where it is one that extends, else dynamic NTK), as far as the KV pool holds one full row
beside every lane; past the trained length quality may drop, which the banner and /health say.

Why dynamic NTK and not YaRN by default: dynamic NTK stretches RoPE's base only once a sequence
outgrows the trained length, so every shorter request computes exactly what the unscaled model
does, where YaRN rescales every position. On the default model (trained on 8192) YaRN at factor
4 answered "What is the capital of France?" with French nonsense, greedy; dynamic NTK and the
unscaled model both answered "The capital of France is Paris." (2026-12-02, docs/connect-your-tools.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.device.kv_sizing import pool_pages
from engine.engine_config import EngineConfig
from engine.model.loading.loader import LoadedModel, with_served_context
from engine.model.model_config import CONTEXT_EXTENSION_KINDS
from pooled.configuration.settings import Settings

AGENT_CONTEXT = 32768


@dataclass(frozen=True)
class ServedContext:
    model: LoadedModel  # serving `model.config.context_length` tokens
    trained: int  # the checkpoint's trained context
    rope_scaling: str | None  # the scaling that extends the context past `trained`, or None


def served_context(model: LoadedModel, settings: Settings, config: EngineConfig) -> ServedContext:
    """`model` (loaded with `--ctx` applied, if given) at the context it will serve."""
    trained = model.config.trained_context_length
    if settings.ctx is not None and settings.rope_scaling is not None:
        # The override keeps the checkpoint's trained length as its original (engine.model.model_config.with_context).
        original = model.config.rope_scaling.original_max_position_embeddings or model.config.max_position_embeddings
        return ServedContext(model, original, settings.rope_scaling if settings.ctx > original else None)
    if settings.ctx is not None or trained >= AGENT_CONTEXT:
        return ServedContext(model, trained, None)
    kind = settings.rope_scaling or model.config.rope_scaling.kind
    kind = kind if kind in CONTEXT_EXTENSION_KINDS else "dynamic"
    extended = with_served_context(model, AGENT_CONTEXT, kind)
    # The pool must hold one full row beside every lane's private page (engine/engine.py).
    fits = (pool_pages(extended, config) - 1 - config.decode_lanes) * config.page_size
    if fits >= AGENT_CONTEXT:
        return ServedContext(extended, trained, kind)
    if fits <= trained:
        return ServedContext(model, trained, None)
    return ServedContext(with_served_context(model, fits, kind), trained, kind)
