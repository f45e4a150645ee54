"""Helpers for engine tests: collect a request's events, and a contiguous-cache greedy reference."""

import threading
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from engine.api import (
    EngineEvent,
    Failed,
    Finished,
    GenerationRequest,
    Prefilled,
    SamplingParams,
    TokenLogprob,
    Tokens,
)
from engine.engine import Engine
from engine.model.layers.lora import LoraBatch
from engine.model.loading.loader import LoadedModel

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)
WAIT_S = 60.0


class Collected:
    """Every event of one request; `done` is set once each row finished or the request failed."""

    def __init__(self, n: int) -> None:
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.logprobs: list[list] = [[] for _ in range(n)]
        self.finished: dict[int, Finished] = {}
        self.failed: Failed | None = None
        self.prefilled: list[int] = []  # each prefill chunk's end, in order
        self.prompt_logprobs: list[TokenLogprob] = []  # from the Prefilled events, in order
        self.late_events = 0  # events for a row after its Finished: a sink must never see any
        self.done = threading.Event()
        self.request_id = 0
        self._n = n

    def __call__(self, event: EngineEvent) -> None:
        if isinstance(event, Prefilled):
            self.prefilled.append(event.done)
            self.prompt_logprobs.extend(event.logprobs)
            return
        if not isinstance(event, Failed) and event.row in self.finished:
            self.late_events += 1
        if isinstance(event, Tokens):
            self.tokens[event.row].extend(event.token_ids)
            self.logprobs[event.row].extend(event.logprobs or ())
        elif isinstance(event, Finished):
            self.finished[event.row] = event
        else:
            self.failed = event
        if self.failed is not None or len(self.finished) == self._n:
            self.done.set()

    def wait(self) -> "Collected":
        assert self.done.wait(WAIT_S), "request did not finish"
        assert self.late_events == 0, "a row got events after it finished"
        return self


def prompt(seed: int, length: int) -> list[int]:
    """Random token ids of the tiny models' vocabulary (above the special ids)."""
    return np.random.default_rng(seed).integers(3, 256, size=length).tolist()


def start(engine: Engine, request: GenerationRequest) -> Collected:
    collected = Collected(request.n)
    collected.request_id = engine.submit(request, collected)
    return collected


def generate(engine: Engine, request: GenerationRequest) -> Collected:
    return start(engine, request).wait()


def greedy_request(prompt: Sequence[int], max_tokens: int, **sampling: object) -> GenerationRequest:
    params = SamplingParams(**{"temperature": 0.0, "ignore_eos": True, **sampling})  # type: ignore[arg-type]
    return GenerationRequest(tuple(prompt), params, max_tokens)


def reference_greedy(
    model: LoadedModel, prompt: Sequence[int], steps: int, length: int, lora: LoraBatch | None = None
) -> list[int]:
    """Greedy tokens from the plain forward pass with a contiguous cache (no engine involved), with
    `lora`'s adapter slot (one row) when given."""
    cache = model.init_kv_cache(batch=1, length=length)
    logits, cache = model.forward(
        jnp.asarray([prompt], jnp.int32), jnp.arange(len(prompt), dtype=jnp.int32)[None], cache, lora
    )
    out = [int(np.argmax(logits[0, -1]))]
    for step in range(steps - 1):
        position = jnp.asarray([[len(prompt) + step]], jnp.int32)
        logits, cache = model.forward(jnp.asarray([[out[-1]]], jnp.int32), position, cache, lora)
        out.append(int(np.argmax(logits[0, 0])))
    return out
