"""Small deterministic images for the vision preprocessing tests, encoded in memory with Pillow.

Pixels come from numpy with a fixed seed (smooth gradients plus noise, so resizing has work to do);
each fixture is kept to a few dozen patches. `tools/reference/vision_preprocess.py` runs
transformers' Qwen2-VL image processor on these bytes and stores its output as goldens;
tests/engine/test_vision_images.py rebuilds the same bytes and compares.
"""

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image

SEED = 2024


@dataclass(frozen=True)
class TinyImage:
    data: bytes
    max_pixels: int | None  # the server setting it is prepared with; None: the model's own


def _pixels(rng: np.random.Generator, width: int, height: int, channels: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 255 // max(width - 1, 1) + 60 * c + y * 3) % 256 for c in range(channels)], axis=-1)
    noise = rng.integers(-40, 41, size=(height, width, channels))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def tiny_images() -> dict[str, TinyImage]:
    """name → fixture; the same bytes on every call."""
    rng = np.random.default_rng(SEED)
    rgb = Image.fromarray(_pixels(rng, 75, 50, 3))  # not a multiple of 28 either way
    rgba_pixels = _pixels(rng, 64, 48, 4)
    rgba_pixels[:, :16, 3] = 0  # fully transparent, partly transparent and opaque regions
    rgba_pixels[:, 16:32, 3] = 128
    rgba_pixels[:, 32:, 3] = 255
    rgba = Image.fromarray(rgba_pixels)
    photo = Image.fromarray(_pixels(rng, 100, 80, 3))
    large = Image.fromarray(_pixels(rng, 900, 600, 3))
    tiny = Image.fromarray(_pixels(rng, 20, 30, 3))  # below min_pixels: upscaled
    gray = Image.fromarray(_pixels(rng, 60, 45, 1)[:, :, 0])
    palette = Image.fromarray(_pixels(rng, 40, 40, 3)).quantize(colors=16)
    webp = Image.fromarray(_pixels(rng, 56, 56, 3))
    return {
        "rgb_png": TinyImage(_encode(rgb, "PNG"), None),
        "rgba_png": TinyImage(_encode(rgba, "PNG"), None),
        "jpeg": TinyImage(_encode(photo, "JPEG", quality=85), None),
        "large_png_capped": TinyImage(_encode(large, "PNG"), 112 * 112),
        "tiny_png": TinyImage(_encode(tiny, "PNG"), None),
        "gray_png": TinyImage(_encode(gray, "PNG"), None),
        # Palette index 0 transparent: converted through RGBA onto white, as transformers does.
        "transparent_gif": TinyImage(_encode(palette, "GIF", transparency=0), None),
        "webp_lossless": TinyImage(_encode(webp, "WEBP", lossless=True), None),
    }
