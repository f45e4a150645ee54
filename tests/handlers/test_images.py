"""Image parts → bytes, and a rendered prompt → the engine's prompt (handlers/generation/images.py)."""

import asyncio
import base64
import io
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from engine.api import Vision
from engine.vision.images import ImageRules
from handlers.api_error import ApiError
from handlers.availability import counting_images
from handlers.generation.images import ImagePart, check_images_served, image_from_url, planned, with_images
from tests.conftest import StubModel

IMAGE_TOKEN = 9
VISION = Vision(IMAGE_TOKEN, ImageRules())


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), np.uint8)).save(out, format="PNG")
    return out.getvalue()


def test_a_data_uri_gives_its_bytes_and_a_url_to_fetch_is_refused() -> None:
    data = _png(28, 28)
    assert image_from_url("data:image/png;base64," + base64.b64encode(data).decode(), "p").data == data
    with pytest.raises(ApiError) as fetched:
        image_from_url("https://example.com/a.png", "messages.0.content.1.image_url")
    assert fetched.value.status == 400 and fetched.value.param == "messages.0.content.1.image_url"
    with pytest.raises(ApiError, match="not valid base64"):
        image_from_url("data:image/png;base64,@@@", "p")


def test_each_image_token_becomes_as_many_as_its_image_takes() -> None:
    images = [ImagePart(_png(56, 56), "a"), ImagePart(_png(112, 56), "b")]  # 4 and 8 tokens
    prompt, prepared = with_images([1, IMAGE_TOKEN, 2, IMAGE_TOKEN, 3], images, VISION)
    assert [image.tokens for image in prepared] == [4, 8]
    assert prompt == (1, *[IMAGE_TOKEN] * 4, 2, *[IMAGE_TOKEN] * 8, 3)


def test_refusals() -> None:
    one = [ImagePart(_png(56, 56), "messages.0.content.0.image_url")]
    with pytest.raises(ApiError, match="takes no images") as no_vision:
        check_images_served(one, None, 4)
    assert no_vision.value.param == "messages.0.content.0.image_url"
    with pytest.raises(ApiError, match="at most 1"):
        check_images_served(one * 2, VISION, 1)
    with pytest.raises(ApiError, match="placed 0 images for the 1"):
        with_images([1, 2], one, VISION)
    with pytest.raises(ApiError, match="cannot be used"):
        with_images([IMAGE_TOKEN], [ImagePart(b"not an image", "p")], VISION)


def test_an_image_counted_before_the_engine_is_up_gets_the_loading_answer() -> None:
    """Counting routes answer from the tokenizer while the engine compiles; an image's tokens need
    the engine's rules, so an image then is "retry later", not "this model takes no images"."""
    loading = StubModel(state="loading")
    with pytest.raises(ApiError) as raised, counting_images(loading, 529) as vision:
        assert vision is None
        check_images_served([ImagePart(_png(28, 28), "messages.0.content.0")], vision, 4)
    assert (raised.value.status, raised.value.code) == (529, "model_not_ready")
    assert raised.value.headers["Retry-After"] == "5"
    text_only = StubModel(state="serving", engine=SimpleNamespace(vision=None))
    with pytest.raises(ApiError, match="takes no images"), counting_images(text_only, 503) as vision:
        check_images_served([ImagePart(_png(28, 28), "messages.0.content.0")], vision, 4)


def test_a_plan_runs_off_the_event_loop_where_the_model_takes_images() -> None:
    async def threads() -> tuple[int, int, int]:
        return (
            threading.get_ident(),
            await planned(None, threading.get_ident),
            await planned(VISION, threading.get_ident),
        )

    loop, text_only_plan, image_plan = asyncio.run(threads())
    assert text_only_plan == loop and image_plan != loop
