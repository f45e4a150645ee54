"""Qwen2-VL and Qwen2.5-VL against transformers: the vision tower, M-RoPE and the image tokens'
embeddings in the decoder, on tiny random checkpoints (goldens from tools/reference/tiny_vision.py)."""

import json
from pathlib import Path

import gguf
import jax.numpy as jnp
import numpy as np
import pytest

from engine.errors import CheckpointError
from engine.model.families.qwen2_vl.rope_index import rope_index
from engine.model.families.qwen2_vl.vision_tower import QUERY_CHUNK, VisionConfig, VisionTower, tower_inputs
from engine.model.loading.loader import LoadedModel, load_model
from tests.engine.tiny_gguf_decoders import write_tiny_gguf
from tests.engine.tiny_vision_checkpoints import (
    IMAGE_GRIDS,
    IMAGE_TOKEN,
    MERGE,
    TINY_VISION_MODELS,
    build_tiny_vision_checkpoint,
    tiny_image_patches,
    write_vision_checkpoint,
)
from tools.vision_gguf import write_pair

pytestmark = pytest.mark.slow  # the vision tower and decoder through XLA

GOLDENS = Path(__file__).resolve().parent.parent / "goldens" / "tiny"


def _golden(name: str) -> dict:
    return json.loads((GOLDENS / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(TINY_VISION_MODELS))
@pytest.mark.parametrize(("bucket", "query_chunk"), [(84, QUERY_CHUNK), (128, QUERY_CHUNK), (84, 28), (128, 32)])
def test_logits_with_two_images_match_transformers(name: str, bucket: int, query_chunk: int, tmp_path: Path) -> None:
    """`bucket` patches: the images exactly, or padded (padding must not change a real patch);
    their queries attended all at once, or a chunk at a time (a windowed block's chunk reading
    only the keys around it: the tiny windows are 16 patches)."""
    model = load_model(
        build_tiny_vision_checkpoint(name, tmp_path / name), cache_dir=tmp_path / "cache", progress=False
    )
    logits = _two_image_logits(model, bucket, query_chunk)
    np.testing.assert_allclose(logits, _golden(name)["logits"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", sorted(TINY_VISION_MODELS))
def test_llama_cpp_gguf_pair_matches_transformers(name: str, tmp_path: Path) -> None:
    """The same checkpoint as llama.cpp's language GGUF and mmproj GGUF (float32) reads as the
    same model: its projector type picks the tower, its file the image token and M-RoPE sections."""
    language, mmproj = write_pair(build_tiny_vision_checkpoint(name, tmp_path / name), tmp_path / "gguf")
    model = load_model(language, mmproj=mmproj, cache_dir=tmp_path / "cache", progress=False)
    assert model.family.name == name and model.config.mrope_section == (2, 3, 3)
    assert model.image_processor is not None and model.image_processor["patch_size"] == 14
    np.testing.assert_allclose(_two_image_logits(model, 84), _golden(name)["logits"], atol=1e-4, rtol=0)


def _two_image_logits(model: LoadedModel, bucket: int, query_chunk: int = QUERY_CHUNK) -> np.ndarray:
    """The decoder's logits [T, V] over the golden's prompt, its two images through the tower in one
    call of `bucket` patches."""
    c = model.config
    assert isinstance(c.vision, VisionConfig) and c.image_token_id == IMAGE_TOKEN
    images = list(zip(tiny_image_patches(), IMAGE_GRIDS, strict=True))
    tower = VisionTower(c.vision, query_chunk=query_chunk)
    embeddings = tower.apply({"params": model.params["vision"]}, tower_inputs(c.vision, images, bucket))
    tokens = np.asarray(_golden(model.config.model_type)["tokens"], np.int32)
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
    return np.asarray(logits)[0]


def test_rope_index_matches_the_reference_layout() -> None:
    """Text counts on; an image spreads over its merged rows and columns from the text's position;
    text after it goes on from the image's largest position plus one."""
    tokens = [7, 7, *[IMAGE_TOKEN] * 6, 7]
    index = rope_index(tokens, IMAGE_TOKEN, [(1, 4, 6)], MERGE)  # merged grid 2 × 3
    expected_image = [[2, 2 + r, 2 + c] for r in range(2) for c in range(3)]
    assert index.positions.tolist() == [[0, 0, 0], [1, 1, 1], *expected_image, [5, 5, 5]]
    assert index.shift == 6 - len(tokens)


def test_the_language_gguf_alone_serves_text(tmp_path: Path) -> None:
    """Without its projector a "qwen2vl" GGUF is a text model: no tower, and a text prompt's logits
    (M-RoPE's three positions equal: plain RoPE) are the whole model's."""
    folder = build_tiny_vision_checkpoint("qwen2_5_vl", tmp_path / "model")
    language, _ = write_pair(folder, tmp_path / "gguf")
    text_only = load_model(language, cache_dir=tmp_path / "cache", progress=False)
    assert text_only.config.vision is None and text_only.config.image_token_id is None
    assert "vision" not in text_only.params and text_only.config.mrope_section == (2, 3, 3)
    whole = load_model(folder, cache_dir=tmp_path / "cache", progress=False)
    tokens, positions = np.arange(3, 19, dtype=np.int32)[None], np.arange(16, dtype=np.int32)[None]
    np.testing.assert_allclose(
        np.asarray(text_only.forward(tokens, positions)[0]), np.asarray(whole.forward(tokens, positions)[0]), atol=1e-5
    )


def test_a_projector_that_does_not_fit_is_a_clear_error(tmp_path: Path) -> None:
    folder = build_tiny_vision_checkpoint("qwen2_vl", tmp_path / "model")
    language, mmproj = write_pair(folder, tmp_path / "gguf")
    cache = tmp_path / "cache"
    with pytest.raises(CheckpointError, match="goes with a GGUF language model"):
        load_model(folder, mmproj=mmproj, cache_dir=cache, progress=False)
    llama = write_tiny_gguf(tmp_path / "llama.gguf", {"default": "F32"})
    with pytest.raises(CheckpointError, match="is a projector for a language model that takes images; .* is llama"):
        load_model(llama, mmproj=mmproj, cache_dir=cache, progress=False)
    narrow = write_vision_checkpoint({**TINY_VISION_MODELS["qwen2_vl"], "hidden_size": 32}, tmp_path / "narrow", 0)
    narrow_language, _ = write_pair(narrow, tmp_path / "narrow-gguf")
    with pytest.raises(CheckpointError, match="gives embeddings 64 wide; the language model is 32"):
        load_model(narrow_language, mmproj=mmproj, cache_dir=cache, progress=False)
    other = gguf.GGUFWriter(tmp_path / "mmproj-gemma3.gguf", "clip")
    other.add_bool("clip.has_vision_encoder", True)
    other.add_string("clip.projector_type", "gemma3")
    other.write_header_to_file()
    other.write_kv_data_to_file()
    other.write_tensors_to_file()
    other.close()
    with pytest.raises(CheckpointError, match="projector type 'gemma3' is not served"):
        load_model(language, mmproj=tmp_path / "mmproj-gemma3.gguf", cache_dir=cache, progress=False)
