"""Prompts with images through the engine: the vision tower on the engine thread, image tokens in
prefill chunks, M-RoPE in decode, the prefix cache keyed by the images; against transformers'
greedy continuation (goldens from tools/reference/tiny_vision.py)."""

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.api import RequestRefused
from engine.engine import Engine
from engine.engine_config import EngineConfig
from engine.model.image_tower import PreparedImage
from engine.model.loading.loader import load_model
from tests.engine.engine_harness import generate, greedy_request
from tests.engine.tiny_vision_checkpoints import (
    IMAGE_GRIDS,
    IMAGE_TOKEN,
    MERGE,
    build_tiny_vision_checkpoint,
    tiny_image_patches,
    tiny_vision_prompt,
)

pytestmark = pytest.mark.slow  # builds an engine

GOLDENS = Path(__file__).resolve().parent.parent / "goldens" / "tiny"
# Chunks of 16 split both images across chunks; 128 patches hold either image in one tower call.
CONFIG = EngineConfig(decode_lanes=4, page_size=8, prefill_chunk=16, max_image_pixels=128 * 14 * 14)


def _images(seed: int = 0) -> tuple[PreparedImage, ...]:
    return tuple(
        PreparedImage(patches + seed, grid, bytes([seed, i]) * 8, MERGE)
        for i, (patches, grid) in enumerate(zip(tiny_image_patches(), IMAGE_GRIDS, strict=True))
    )


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen2_vl"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Engine]]:
    name = request.param
    directory = tmp_path_factory.mktemp(name)
    model = load_model(build_tiny_vision_checkpoint(name, directory / "model"), cache_dir=directory, progress=False)
    built = Engine.build(model, CONFIG, lambda *_: None)
    yield name, built
    built.shutdown()


def test_greedy_answer_equals_transformers_and_a_resent_prompt_hits_the_cache(engine: tuple[str, Engine]) -> None:
    name, served = engine
    golden = json.loads((GOLDENS / f"{name}.json").read_text())
    assert served.vision is not None and served.vision.image_token_id == IMAGE_TOKEN
    request = dataclasses.replace(greedy_request(tiny_vision_prompt(), len(golden["greedy"])), images=_images())
    first = generate(served, request)
    assert first.failed is None
    assert first.tokens[0] == golden["greedy"]
    assert first.finished[0].usage.cached_prompt_tokens == 0
    again = generate(served, request)
    assert again.tokens[0] == golden["greedy"]
    prompt_pages = len(tiny_vision_prompt()) // CONFIG.page_size
    assert again.finished[0].usage.cached_prompt_tokens == prompt_pages * CONFIG.page_size


def test_another_image_in_the_same_place_is_not_taken_from_the_cache(engine: tuple[str, Engine]) -> None:
    _, served = engine
    prompt = tiny_vision_prompt()
    generate(served, dataclasses.replace(greedy_request(prompt, 2), images=_images()))
    other = generate(served, dataclasses.replace(greedy_request(prompt, 2), images=_images(seed=1)))
    first_image_page = prompt.index(IMAGE_TOKEN) // CONFIG.page_size
    assert other.finished[0].usage.cached_prompt_tokens <= first_image_page * CONFIG.page_size


def test_a_text_prompt_on_a_vision_model_is_served(engine: tuple[str, Engine]) -> None:
    _, served = engine
    text = [t for t in tiny_vision_prompt() if t != IMAGE_TOKEN]
    answer = generate(served, greedy_request(text, 4))
    assert answer.failed is None and len(answer.tokens[0]) == 4


def test_image_tokens_must_match_the_images(engine: tuple[str, Engine]) -> None:
    _, served = engine
    prompt = tiny_vision_prompt()
    with pytest.raises(RequestRefused, match="runs of"):
        served.submit(dataclasses.replace(greedy_request(prompt, 2), images=_images()[:1]), lambda _: None)
    with pytest.raises(RequestRefused, match="runs of"):
        served.submit(greedy_request(prompt, 2), lambda _: None)  # image tokens without images
    with pytest.raises(RequestRefused, match="not served for prompts with images"):
        request = dataclasses.replace(greedy_request(prompt, 2), images=_images(), prompt_logprobs=0)
        served.submit(request, lambda _: None)


def test_the_tower_compiled_at_start_up(engine: tuple[str, Engine]) -> None:
    _, served = engine
    assert any(bucket.kind == "vision" for bucket in served.stats().buckets)
    assert served.runner.compiles_after_startup() == 0
