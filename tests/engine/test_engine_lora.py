"""LoRA adapters served by the engine (engine/serving/adapter_table.py) on the real runner and a tiny model:
requests naming different adapters, and none, decode together and each gets what the adapter's
forward pass gives; prefix pages are the adapter's own; an unload waits for the adapter's
running requests; unknown adapters and full slots are refused by name. No request compiles."""

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import jax.numpy as jnp
import pytest

from engine.api import AdapterRefused, EngineEvent, GenerationRequest, RequestRefused, SamplingParams, Tokens
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.lora.adapter_stack import stack_adapters
from engine.lora.peft_adapter import LoraAdapter, read_peft_adapter
from engine.model.layers.lora import LoraBatch
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.engine_harness import Collected, generate, greedy_request, prompt, reference_greedy, start
from tests.engine.tiny_lora import build_tiny_adapter

pytestmark = pytest.mark.slow  # builds an engine

CONTEXT = 64
NAMES = ("llama_all", "llama_qv_rslora", "llama_mlp")
CONFIG = EngineConfig(decode_lanes=4, page_size=8, prefill_chunk=16, max_loras=3, max_lora_rank=8)


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(tiny_checkpoint("llama_tied"), cache_dir=tmp_path_factory.mktemp("prepared"), progress=False)


@pytest.fixture(scope="module")
def adapters(model: LoadedModel, tmp_path_factory: pytest.TempPathFactory) -> dict[str, LoraAdapter]:
    root = tmp_path_factory.mktemp("adapters")
    return {name: read_peft_adapter(build_tiny_adapter(name, root / name), model.config) for name in NAMES}


@pytest.fixture(scope="module")
def engine(model: LoadedModel, adapters: dict[str, LoraAdapter]) -> Iterator[Engine]:
    built = Engine.build(model, CONFIG, lambda *_: None)
    for name, adapter in adapters.items():
        built.load_adapter(name, adapter).result(timeout=30)
    yield built
    built.shutdown()


def alone_reference(model: LoadedModel, adapter: LoraAdapter | None, tokens: list[int], steps: int) -> list[int]:
    lora = None
    if adapter is not None:
        lora = LoraBatch(stack_adapters(model.config, [adapter], adapter.rank), jnp.ones(1, jnp.int32))
    return reference_greedy(model, tokens, steps, CONTEXT, lora)


def test_requests_of_three_adapters_and_none_decode_together_as_each_does_alone(
    engine: Engine, model: LoadedModel, adapters: dict[str, LoraAdapter]
) -> None:
    tokens = prompt(1, 13)
    names: list[str | None] = [*NAMES, None]
    expected = [alone_reference(model, adapters[n] if n else None, tokens, 10) for n in names]
    assert len({tuple(e) for e in expected}) == 4  # each adapter changes the greedy answer
    requests = [GenerationRequest(tuple(tokens), greedy_request(tokens, 10).sampling, 10, adapter=n) for n in names]
    together = [collected.wait().tokens[0] for collected in [start(engine, request) for request in requests]]
    assert together == expected
    seeded = SamplingParams(temperature=1.0, seed=11, ignore_eos=True)
    sampled = [GenerationRequest(tuple(tokens), seeded, 8, adapter=n) for n in names]
    alone = [generate(engine, request).tokens[0] for request in sampled]
    assert [c.wait().tokens[0] for c in [start(engine, request) for request in sampled]] == alone
    assert [a.requests for a in engine.adapters.listing()] == [3, 3, 3]  # greedy, seeded alone and together
    assert engine.stats().compiles_after_startup == 0


def test_a_prompt_cached_under_one_adapter_is_not_reused_under_another(engine: Engine) -> None:
    tokens = prompt(2, 33)  # four full pages
    first = generate(engine, GenerationRequest(tuple(tokens), greedy_request(tokens, 2).sampling, 2, adapter=NAMES[0]))
    again = generate(engine, GenerationRequest(tuple(tokens), greedy_request(tokens, 2).sampling, 2, adapter=NAMES[0]))
    other = generate(engine, GenerationRequest(tuple(tokens), greedy_request(tokens, 2).sampling, 2, adapter=NAMES[1]))
    plain = generate(engine, greedy_request(tokens, 2))
    assert first.finished[0].usage.cached_prompt_tokens == 0
    assert again.finished[0].usage.cached_prompt_tokens == 32 and again.tokens == first.tokens
    assert other.finished[0].usage.cached_prompt_tokens == 0
    assert plain.finished[0].usage.cached_prompt_tokens == 0


def test_unknown_adapters_and_full_slots_are_refused_by_name(engine: Engine, adapters: dict[str, LoraAdapter]) -> None:
    with pytest.raises(RequestRefused, match=r"no LoRA adapter named 'nope' is loaded \(loaded: llama_all, llama_mlp"):
        engine.submit(GenerationRequest((5, 6), greedy_request([5], 1).sampling, 1, adapter="nope"), lambda _: None)
    with pytest.raises(AdapterRefused, match="all 3 adapter slots are taken"):
        engine.load_adapter("fourth", adapters[NAMES[0]])
    with pytest.raises(AdapterRefused, match="already loaded"):
        engine.load_adapter(NAMES[0], adapters[NAMES[0]])


def test_unload_waits_for_the_adapters_running_requests(
    engine: Engine, model: LoadedModel, adapters: dict[str, LoraAdapter]
) -> None:
    tokens = prompt(3, 9)
    release, held = threading.Event(), threading.Event()
    collected = Collected(1)

    def holding(event: EngineEvent) -> None:  # sinks run on the engine thread: this holds the request
        collected(event)
        if isinstance(event, Tokens) and not held.is_set():
            held.set()
            release.wait(30)

    request = GenerationRequest(tuple(tokens), greedy_request(tokens, 6).sampling, 6, adapter=NAMES[2])
    engine.submit(request, holding)
    assert held.wait(30)
    unloading = engine.unload_adapter(NAMES[2])
    with pytest.raises(RequestRefused, match="no LoRA adapter named 'llama_mlp'"):
        engine.submit(GenerationRequest(tuple(tokens), request.sampling, 1, adapter=NAMES[2]), lambda _: None)
    assert not unloading.done()
    release.set()
    unloading.result(timeout=30)
    assert collected.wait().tokens[0] == alone_reference(model, adapters[NAMES[2]], tokens, 6)
    assert [a.name for a in engine.adapters.listing()] == ["llama_all", "llama_qv_rslora"]
    engine.load_adapter(NAMES[2], adapters[NAMES[2]]).result(timeout=30)  # the slot is free again
    assert generate(engine, request).tokens[0] == collected.tokens[0]
