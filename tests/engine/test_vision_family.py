"""Qwen2-VL and Qwen2.5-VL against transformers: the vision tower, M-RoPE and the image tokens'
embeddings in the decoder, on tiny random checkpoints (goldens from tools/reference/tiny_vision.py)."""

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from engine.model.checkpoint.loader import load_model
from engine.model.layers.vision import VisionTower, tower_inputs
from engine.vision.rope_index import rope_index
from tests.engine.tiny_vision_checkpoints import (
    IMAGE_GRIDS,
    IMAGE_TOKEN,
    MERGE,
    TINY_VISION_MODELS,
    build_tiny_vision_checkpoint,
    tiny_image_patches,
)

GOLDENS = Path(__file__).resolve().parent.parent / "goldens" / "tiny"


def _golden(name: str) -> dict:
    return json.loads((GOLDENS / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(TINY_VISION_MODELS))
@pytest.mark.parametrize("bucket", [84, 128])
def test_logits_with_two_images_match_transformers(name: str, bucket: int, tmp_path: Path) -> None:
    """`bucket` patches: the images exactly, or padded (padding must not change a real patch)."""
    expected = _golden(name)
    model = load_model(
        build_tiny_vision_checkpoint(name, tmp_path / name), cache_dir=tmp_path / "cache", progress=False
    )
    c = model.config
    assert c.vision is not None and c.image_token_id == IMAGE_TOKEN
    images = list(zip(tiny_image_patches(), IMAGE_GRIDS, strict=True))
    embeddings = VisionTower(c.vision).apply({"params": model.params["vision"]}, tower_inputs(c.vision, images, bucket))
    tokens = np.asarray(expected["tokens"], np.int32)
    image_rows = np.flatnonzero(tokens == IMAGE_TOKEN)
    media = np.zeros((1, len(tokens), c.hidden_size), np.float32)
    media[0, image_rows] = np.asarray(embeddings)[: len(image_rows)]
    index = rope_index(tokens.tolist(), IMAGE_TOKEN, IMAGE_GRIDS, MERGE)
    decoder = model.family.model(c, jnp.float32)
    decoder_params = {k: v for k, v in model.params.items() if k != "vision"}
    keyed = np.where(tokens == IMAGE_TOKEN, -1, tokens)  # the engine's image tokens are below zero
    logits, _ = decoder.apply(
        {"params": decoder_params},
        keyed[None],
        np.arange(len(tokens), dtype=np.int32)[None],
        media=media,
        rope_positions=index.positions[None],
    )
    np.testing.assert_allclose(np.asarray(logits)[0], expected["logits"], atol=1e-4, rtol=0)


def test_rope_index_matches_the_reference_layout() -> None:
    """Text counts on; an image spreads over its merged rows and columns from the text's position;
    text after it goes on from the image's largest position plus one."""
    tokens = [7, 7, *[IMAGE_TOKEN] * 6, 7]
    index = rope_index(tokens, IMAGE_TOKEN, [(1, 4, 6)], MERGE)  # merged grid 2 × 3
    expected_image = [[2, 2 + r, 2 + c] for r in range(2) for c in range(3)]
    assert index.positions.tolist() == [[0, 0, 0], [1, 1, 1], *expected_image, [5, 5, 5]]
    assert index.shift == 6 - len(tokens)
