"""engine/model/families/qwen2_vl/image_processing.py against transformers' Qwen2-VL image processor
(PIL backend), through goldens written by tools/reference/vision_preprocess.py from the images of
tests/engine/tiny_images.py."""

import hashlib
import io
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from engine.errors import CheckpointError
from engine.model.families.qwen2_vl.image_processing import (
    ImageError,
    ImageRules,
    decode_image,
    image_tokens,
    prepare_image,
    smart_resize,
)
from tests.engine.tiny_images import tiny_images

GOLDEN = Path(__file__).resolve().parent.parent / "goldens" / "vision_preprocess.json"
FIXTURES = tiny_images()
RULES = ImageRules()


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return dict(json.loads(GOLDEN.read_text()))


@pytest.mark.parametrize("name", list(FIXTURES))
def test_patches_equal_transformers(name: str, golden: dict[str, Any]) -> None:
    """Equal to the bit: the patches' digest is transformers'; their row sums say where a
    difference lies when it is not."""
    fixture, expected = FIXTURES[name], golden[name]
    prepared = prepare_image(fixture.data, RULES, max_pixels=fixture.max_pixels)
    assert prepared.grid == tuple(expected["grid"])
    assert prepared.patches.dtype == np.float32 and prepared.patches.flags.c_contiguous
    assert list(prepared.patches.shape) == expected["shape"]
    row_sums = prepared.patches.astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(row_sums, expected["row_sums"], rtol=0, atol=1e-3)
    assert hashlib.sha256(prepared.patches.tobytes()).hexdigest() == expected["sha256"]


@pytest.mark.parametrize("name", list(FIXTURES))
def test_token_counts(name: str) -> None:
    fixture = FIXTURES[name]
    prepared = prepare_image(fixture.data, RULES, max_pixels=fixture.max_pixels)
    t, h, w = prepared.grid
    assert prepared.tokens == t * h * w // 4 == RULES.grid_tokens(prepared.grid)
    assert len(prepared.patches) == t * h * w
    width, height = Image.open(io.BytesIO(fixture.data)).size
    assert image_tokens(width, height, RULES, max_pixels=fixture.max_pixels) == prepared.tokens


def test_server_max_pixels_only_lowers_the_models() -> None:
    assert image_tokens(900, 600, RULES, max_pixels=10**9) == image_tokens(900, 600, RULES)
    assert image_tokens(900, 600, RULES, max_pixels=112 * 112) < image_tokens(900, 600, RULES)


def test_transparency_composited_onto_white() -> None:
    image = decode_image(FIXTURES["rgba_png"].data)
    assert image.mode == "RGB"
    assert np.all(np.asarray(image)[:, :16] == 255)  # the fully transparent columns


def test_a_photo_is_turned_upright_by_its_exif_orientation() -> None:
    pixels = np.zeros((20, 40, 3), np.uint8)
    pixels[:, :20] = 255  # the left half white
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: the camera was held turned; shown turned 90 degrees clockwise
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", exif=exif)
    upright = np.asarray(decode_image(out.getvalue()))
    assert upright.shape == (40, 20, 3)
    assert upright[:18].mean() > 240 and upright[22:].mean() < 15  # the left half is now the top


def test_garbage_bytes() -> None:
    for data in (b"", b"not an image at all", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40):
        with pytest.raises(ImageError, match="could not be read"):
            prepare_image(data, RULES)


def test_other_formats_refused() -> None:
    out = io.BytesIO()
    Image.new("RGB", (30, 30)).save(out, format="BMP")
    with pytest.raises(ImageError, match="not a PNG, JPEG, GIF or WebP"):
        decode_image(out.getvalue())


def test_truncated_image() -> None:
    data = FIXTURES["large_png_capped"].data
    with pytest.raises(ImageError, match="could not be decoded"):
        decode_image(data[: len(data) // 2])


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png_header(width: int, height: int) -> bytes:
    # A signature, an IHDR and an empty IDAT: Pillow opens it by its size, and decoding it would fail.
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", b"")


def test_too_many_pixels_refused_before_decoding() -> None:
    with pytest.raises(ImageError, match="is 5000x5000 pixels, more than the 16777216 this server decodes"):
        decode_image(_png_header(5000, 5000))
    with pytest.raises(ImageError, match="is 75x50 pixels, more than the 3000"):
        prepare_image(FIXTURES["rgb_png"].data, RULES, max_decoded_pixels=3000)
    # Past Pillow's own decompression-bomb limit the refusal comes from Pillow, still as an ImageError.
    with pytest.raises(ImageError):
        decode_image(_png_header(100_000, 100_000), max_decoded_pixels=10**12)


def test_extreme_aspect_ratio() -> None:
    out = io.BytesIO()
    Image.new("RGB", (402, 2)).save(out, format="PNG")
    with pytest.raises(ImageError, match="aspect ratio is more than 200 to 1"):
        prepare_image(out.getvalue(), RULES)
    with pytest.raises(ImageError, match="aspect ratio"):
        image_tokens(1, 201, RULES)
    assert smart_resize(1, 200, 28, 56 * 56, 28 * 28 * 1280) == (28, 812)  # transformers' answer at the limit


def test_digest_is_the_bytes_identity() -> None:
    first = prepare_image(FIXTURES["rgb_png"].data, RULES)
    again = prepare_image(bytes(FIXTURES["rgb_png"].data), RULES)
    other = prepare_image(FIXTURES["jpeg"].data, RULES)
    assert len(first.digest) == 16
    assert first.digest == again.digest
    assert first.digest != other.digest


def test_rules_from_hub_config() -> None:
    # Qwen2-VL-7B-Instruct's preprocessor_config.json.
    rules = ImageRules.from_hf(
        {
            "min_pixels": 3136,
            "max_pixels": 12845056,
            "patch_size": 14,
            "temporal_patch_size": 2,
            "merge_size": 2,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2VLProcessor",
        }
    )
    assert rules == ImageRules(max_pixels=12845056)


def test_rules_from_transformers5_config() -> None:
    # Qwen2VLImageProcessor().to_dict() in transformers 5.
    config = {
        "size": {"longest_edge": 1003520, "shortest_edge": 3136},
        "do_convert_rgb": True,
        "do_resize": True,
        "resample": 3,
        "do_rescale": True,
        "rescale_factor": 0.00392156862745098,
        "do_normalize": True,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor",
    }
    assert ImageRules.from_hf(config) == ImageRules()
    # Top-level pixel limits win over `size`, as in transformers' __init__.
    assert ImageRules.from_hf({**config, "max_pixels": 4096}).max_pixels == 4096
    with pytest.raises(CheckpointError, match="do_normalize"):
        ImageRules.from_hf({**config, "do_normalize": False})
    with pytest.raises(CheckpointError, match="resample"):
        ImageRules.from_hf({**config, "resample": 2})


def test_module_imports_no_jax() -> None:
    # HTTP handlers use it: it must stay cheap to import.
    code = (
        "import sys, engine.model.families.qwen2_vl.image_processing; assert 'jax' not in sys.modules, 'jax imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
