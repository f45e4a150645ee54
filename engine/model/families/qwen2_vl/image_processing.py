"""Host-side image preprocessing for the Qwen2-VL / Qwen2.5-VL vision encoders: image bytes → patch rows
(a `PreparedImage`, engine/model/image_tower.py).

`prepare_image` gives, for one image, the `pixel_values` rows and `image_grid_thw` that transformers'
`Qwen2VLImageProcessorPil` (the PIL backend) gives for the same decoded PIL image, equal to the last
bit (tests/engine/test_vision_images.py checks it against goldens from tools/reference/vision_preprocess.py):
transparency composited onto white, Pillow's bicubic resize of uint8 pixels to `smart_resize`'s size,
rescale in float64 then float32, normalize in float32, one frame repeated to `temporal_patch_size`,
rows ordered by merge blocks. transformers' default `Qwen2VLImageProcessor` (the torchvision
backend, "fast") resizes with torch's antialiased bicubic instead: measured on the goldens' images
(transformers 5.25, torchvision 0.29.1, on an AVX2 CPU), the same grids, and 0.4% of values one uint8
step apart (at most 0.0150 after normalizing); an image that needs no resize differs by under 3e-7.

Decoding takes PNG, JPEG, GIF (its first frame) and WebP, refuses an image whose header claims more
pixels than a limit before decoding any, and applies nothing but the conversion to RGB: no EXIF
rotation, as transformers' processors apply none to a PIL image they are given (its `load_image`, for
URLs and paths, does).

No jax here: HTTP handlers count an image's tokens and refuse bad images with this module too.
"""

import dataclasses
import hashlib
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from engine.errors import CheckpointError
from engine.model.image_tower import PreparedImage

# 4096x4096: RGB at this size is 48 MiB, and resizing needs a few such copies.
MAX_DECODED_PIXELS = 4096 * 4096
# The aspect ratio past which transformers' smart_resize refuses an image.
MAX_ASPECT_RATIO = 200
_FORMATS = ("PNG", "JPEG", "GIF", "WEBP")
_OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class ImageError(ValueError):
    """An image that cannot be used; the message is one line meant for the user."""


@dataclass(frozen=True)
class ImageRules:
    """A model's image preprocessing, as its checkpoint's preprocessor_config.json gives it (defaults: Qwen2-VL's)."""

    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    image_mean: tuple[float, float, float] = _OPENAI_CLIP_MEAN
    image_std: tuple[float, float, float] = _OPENAI_CLIP_STD
    rescale_factor: float = 1 / 255

    @property
    def factor(self) -> int:
        """Both sides of a resized image are multiples of this: one merge block of patches."""
        return self.patch_size * self.merge_size

    def grid_tokens(self, grid: tuple[int, int, int]) -> int:
        """The `<|image_pad|>` tokens of an image of `grid` (t, h, w) patches: one per merge block."""
        t, h, w = grid
        return t * h * w // self.merge_size**2

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> "ImageRules":
        """Reads a Qwen2VLImageProcessor's preprocessor_config.json.

        Pixel limits come as top-level `min_pixels`/`max_pixels` (the checkpoints on the Hub) or as
        `size: {shortest_edge, longest_edge}` (what transformers 5 writes); the top-level keys win,
        as in transformers' `__init__`.
        """
        for flag in ("do_resize", "do_rescale", "do_normalize", "do_convert_rgb"):
            if config.get(flag, True) is not True:
                raise CheckpointError(f"preprocessor_config.json sets {flag}={config[flag]!r}; only true is supported")
        if config.get("resample", 3) != 3:  # PIL's BICUBIC
            raise CheckpointError(
                f"preprocessor_config.json asks for resample={config['resample']!r}; only 3 (bicubic)"
            )
        size = config.get("size") or {}
        default = cls()
        min_pixels = config.get("min_pixels", size.get("shortest_edge", size.get("min_pixels", default.min_pixels)))
        max_pixels = config.get("max_pixels", size.get("longest_edge", size.get("max_pixels", default.max_pixels)))
        mean = tuple(float(x) for x in config.get("image_mean", default.image_mean))
        std = tuple(float(x) for x in config.get("image_std", default.image_std))
        if len(mean) != 3 or len(std) != 3:
            raise CheckpointError(
                f"preprocessor_config.json: image_mean and image_std need 3 values, not {mean}, {std}"
            )
        rules = cls(
            patch_size=int(config.get("patch_size", default.patch_size)),
            temporal_patch_size=int(config.get("temporal_patch_size", default.temporal_patch_size)),
            merge_size=int(config.get("merge_size", default.merge_size)),
            min_pixels=int(min_pixels),
            max_pixels=int(max_pixels),
            image_mean=(mean[0], mean[1], mean[2]),
            image_std=(std[0], std[1], std[2]),
            rescale_factor=float(config.get("rescale_factor", default.rescale_factor)),
        )
        if min(rules.patch_size, rules.temporal_patch_size, rules.merge_size, rules.min_pixels, rules.max_pixels) < 1:
            raise CheckpointError(f"preprocessor_config.json: sizes must be positive, got {rules}")
        return rules


def served_rules(processor: Mapping[str, Any] | None, patch_size: int, merge_size: int, max_pixels: int) -> ImageRules:
    """A checkpoint's rules (its preprocessor_config.json's fields, else Qwen2-VL's defaults), with
    `max_pixels` lowered to the server's limit; its sizes must be its vision tower's."""
    rules = ImageRules() if processor is None else ImageRules.from_hf(processor)
    if (rules.patch_size, rules.merge_size) != (patch_size, merge_size):
        raise CheckpointError(
            f"the image processor cuts {rules.patch_size}-pixel patches merged {rules.merge_size} by "
            f"{rules.merge_size}; the vision tower takes {patch_size} and {merge_size}"
        )
    return dataclasses.replace(rules, max_pixels=min(rules.max_pixels, max_pixels))


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' qwen2_vl `smart_resize`: (height, width) as multiples of `factor`, the pixel count
    brought within [min_pixels, max_pixels] (except where rounding up to `factor` overshoots), keeping the
    aspect ratio as near as those allow."""
    if height < 1 or width < 1:
        raise ImageError(f"the image is {width}x{height} pixels: it has none")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ImageError(f"the image is {width}x{height} pixels: its aspect ratio is more than {MAX_ASPECT_RATIO} to 1")
    # round() is Python's, half to even, as transformers has it.
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def decode_image(data: bytes, max_decoded_pixels: int = MAX_DECODED_PIXELS) -> Image.Image:
    """The image in `data` as an RGB PIL image, turned upright by its EXIF orientation (a phone's
    photo, as transformers' `load_image` turns it), its transparency composited onto white."""
    try:
        # Only the header is read here; pixels are decoded by load() below, after the size check.
        image = Image.open(io.BytesIO(data), formats=_FORMATS)
    except Image.DecompressionBombError:
        raise ImageError("the image is too large to decode") from None
    except Exception:  # Pillow's parsers raise many kinds (OSError, SyntaxError, struct.error, ...) on bad bytes
        raise ImageError("the image could not be read: not a PNG, JPEG, GIF or WebP") from None
    width, height = image.size
    if width * height > max_decoded_pixels:
        raise ImageError(
            f"the image is {width}x{height} pixels, more than the {max_decoded_pixels} this server decodes"
        )
    try:
        image.load()
        return _to_rgb(ImageOps.exif_transpose(image))
    except Exception as e:  # truncated or corrupt data past the header
        raise ImageError(f"the {image.format} image could not be decoded: {_reason(e)}") from None


def _to_rgb(image: Image.Image) -> Image.Image:
    # transformers' image_transforms.convert_to_rgb for a PIL image, step for step: an alpha band or a
    # transparent palette/colour key is composited onto opaque white; anything else is Pillow's convert.
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def _reason(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def _resized(width: int, height: int, rules: ImageRules, max_pixels: int | None) -> tuple[int, int]:
    limit = rules.max_pixels if max_pixels is None else min(rules.max_pixels, max_pixels)
    return smart_resize(height, width, rules.factor, rules.min_pixels, limit)


def image_tokens(width: int, height: int, rules: ImageRules, max_pixels: int | None = None) -> int:
    """The `<|image_pad|>` tokens an image of width x height pixels takes, without preparing it."""
    resized_height, resized_width = _resized(width, height, rules, max_pixels)
    return rules.grid_tokens((1, resized_height // rules.patch_size, resized_width // rules.patch_size))


def prepare_image(
    data: bytes,
    rules: ImageRules,
    max_pixels: int | None = None,
    max_decoded_pixels: int = MAX_DECODED_PIXELS,
) -> PreparedImage:
    """Decodes `data` and makes its patch rows; `max_pixels`, a server setting, may lower the model's."""
    image = decode_image(data, max_decoded_pixels)
    height, width = _resized(image.width, image.height, rules, max_pixels)
    # Pillow resizes the uint8 image, as transformers' PIL backend does (reducing_gap unset).
    pixels = np.asarray(image.resize((width, height), resample=Image.Resampling.BICUBIC))
    # The same operations in the same precisions as transformers' rescale and normalize, for the same bits.
    scaled = (pixels.astype(np.float64) * rules.rescale_factor).astype(np.float32)
    mean = np.asarray(rules.image_mean, dtype=np.float32)
    std = np.asarray(rules.image_std, dtype=np.float32)
    normalized = (scaled - mean) / std  # [H, W, C]
    p, m, t = rules.patch_size, rules.merge_size, rules.temporal_patch_size
    grid_h, grid_w = height // p, width // p
    blocks = normalized.reshape(grid_h // m, m, p, grid_w // m, m, p, 3)
    # Rows in merge-block order (block row, block column, row in block, column in block), each row
    # channel-major, then the frame repeated t times, then the patch's pixels: transformers' patchify.
    blocks = blocks.transpose(0, 3, 1, 4, 6, 2, 5)  # [gh/m, gw/m, m, m, C, p, p]
    frames = np.broadcast_to(blocks[:, :, :, :, :, None], (*blocks.shape[:5], t, p, p))
    patches = np.ascontiguousarray(frames.reshape(grid_h * grid_w, 3 * t * p * p), dtype=np.float32)
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return PreparedImage(patches=patches, grid=(1, grid_h, grid_w), digest=digest, merge_size=m)
