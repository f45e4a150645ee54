"""Images in a conversation: each API's image part → bytes, and the rendered prompt → the prompt
the engine takes (each image's tokens, its prepared patches).

An API's converter puts `{"type": "image"}` in a message's content list where an image stood
(the part Hugging Face chat templates of vision models render as the model's image tokens: one
image token for Qwen2-VL's `<|vision_start|><|image_pad|><|vision_end|>`) and collects the image's
bytes in order. Once the template has rendered, each image token becomes as many as the image
takes (engine/model/families/qwen2_vl/image_processing.py decides, by the model's own preprocessing
rules).

Preparing images is the slow part of planning a request: a route plans through `planned`, on a
worker thread when the model takes images.

Images come inline (data URIs, `data:image/png;base64,…`, and base64 blocks), or as http(s) URLs
the server fetches where `--image-url-fetch` allows it (`ImageFetch`); without it a URL is a 400:
the server reaches out to nowhere on a client's behalf. A URL is fetched only once the model is
known to take images, while the request is planned (on a worker thread: `planned`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import httpx

from engine.api import Vision
from engine.inputs import ImageError, PreparedImage, prepare_image
from handlers.api_error import ApiError
from handlers.context import ImageFetch

IMAGE_PART = {"type": "image"}
_FAILED = "image_fetch_failed"
_MAX_REDIRECTS = 3

T = TypeVar("T")


@dataclass(frozen=True)
class ImagePart:
    data: bytes | None  # None: `url` is fetched for it
    param: str  # the request's field it came from, for errors
    url: str | None = None


def image_from_url(url: str, param: str) -> ImagePart:
    """A data URI's image, or an http(s) URL's to fetch later (`with_images`); any other is a 400."""
    if url.startswith(("http://", "https://")):
        return ImagePart(None, param, url)
    if not url.startswith("data:"):
        raise ApiError(
            400, "An image URL must be a data URI (data:image/png;base64,...) or http(s).", "invalid_image_url", param
        )
    header, _, payload = url.partition(",")
    if not header.endswith(";base64"):
        raise ApiError(400, "An image data URI must be base64 (data:<type>;base64,<data>).", "invalid_image_url", param)
    return image_from_base64(payload, param)


def image_from_base64(payload: str, param: str) -> ImagePart:
    try:
        return ImagePart(base64.b64decode(payload, validate=True), param)
    except (binascii.Error, ValueError):
        raise ApiError(400, "The image's base64 data is not valid base64.", code="invalid_image", param=param) from None


async def planned(vision: Vision | None, plan: Callable[[], T]) -> T:
    """`plan()`, on a worker thread where the model takes images: preparing them on the event loop
    (a 12-megapixel JPEG's decode and resize took 325 ms) would hold up every other request's
    stream. A text-only model's plans stay on the loop, with no thread hop a request."""
    if vision is None:
        return plan()
    return await asyncio.to_thread(plan)


def check_images_served(images: Sequence[ImagePart], vision: Vision | None, max_images: int) -> None:
    """Before rendering: a model that takes no images, or too many images, is a 400. The one
    home of both rules: images are met here first, in routes that never reach the engine too
    (counting tokens), and cannot be prepared without the model's rules; the engine's admission
    checks only that a prompt's image-token runs match its images."""
    if not images:
        return
    if vision is None:
        raise ApiError(
            400,
            "This model takes no images: it has no vision encoder (or the server runs with --vision-enabled false).",
            code="images_not_supported",
            param=images[0].param,
        )
    if len(images) > max_images:
        raise ApiError(
            400,
            f"The request holds {len(images)} images; this server takes at most {max_images} (--max-images).",
            code="too_many_images",
            param=images[max_images].param,
        )


def with_images(
    prompt_ids: Sequence[int], images: Sequence[ImagePart], vision: Vision | None, fetch: ImageFetch | None = None
) -> tuple[tuple[int, ...], tuple[PreparedImage, ...]]:
    """The rendered prompt with each image token repeated as many times as its image takes, and
    the images prepared for the model (URLs fetched by `fetch`; None: refused);
    `check_images_served` has passed."""
    if not images:
        return tuple(prompt_ids), ()
    assert vision is not None
    prepared = []
    for image in images:
        data = image.data if image.data is not None else fetched(image.url or "", image.param, fetch)
        try:
            prepared.append(prepare_image(data, vision.rules))
        except ImageError as error:
            raise ApiError(400, f"The image cannot be used: {error}", code="invalid_image", param=image.param) from None
    placed = sum(token == vision.image_token_id for token in prompt_ids)
    if placed != len(prepared):
        raise ApiError(
            400,
            f"The chat template placed {placed} images for the {len(prepared)} the messages hold.",
            code="template_error",
            param=images[0].param,
        )
    expanded: list[int] = []
    pending = iter(prepared)
    for token in prompt_ids:
        if token == vision.image_token_id:
            expanded += [token] * next(pending).tokens
        else:
            expanded.append(token)
    return tuple(expanded), tuple(prepared)


def fetched(url: str, param: str, fetch: ImageFetch | None) -> bytes:
    """The bytes at `url` (http or https, redirects followed), within `fetch`'s time and size; a
    400 naming `param` for every way it fails."""
    if fetch is None:
        raise ApiError(
            400,
            "Images must come inline as data URIs (data:image/png;base64,...); "
            "this server fetches no URLs (--image-url-fetch).",
            code="invalid_image_url",
            param=param,
        )
    deadline = time.monotonic() + fetch.timeout_s
    body = bytearray()
    try:
        with (
            httpx.Client(timeout=fetch.timeout_s, follow_redirects=True, max_redirects=_MAX_REDIRECTS) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise ApiError(
                    400, f"Fetching the image at {url} answered HTTP {response.status_code}.", _FAILED, param
                )
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > fetch.max_bytes:
                    message = f"The image at {url} is over {fetch.max_bytes} bytes (--image-fetch-max-bytes)."
                    raise ApiError(400, message, "image_too_large", param)
                if time.monotonic() > deadline:
                    raise httpx.TimeoutException("the whole fetch took too long")
    except httpx.HTTPError as error:
        reason = str(error) or type(error).__name__
        raise ApiError(400, f"The image at {url} could not be fetched: {reason}.", _FAILED, param) from None
    return bytes(body)
