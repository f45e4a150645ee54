"""Image parts → bytes, and a rendered prompt → the engine's prompt (handlers/generation/images.py)."""

import asyncio
import base64
import io
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from engine.api import Vision
from engine.model.families.qwen2_vl.image_processing import ImageRules
from handlers.api_error import ApiError
from handlers.availability import counting_images
from handlers.context import ImageFetch
from handlers.generation.images import ImagePart, check_images_served, image_from_url, planned, with_images
from tests.conftest import StubModel

IMAGE_TOKEN = 9
VISION = Vision(IMAGE_TOKEN, ImageRules())


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), np.uint8)).save(out, format="PNG")
    return out.getvalue()


def test_a_data_uri_gives_its_bytes_an_http_url_is_kept_to_fetch_and_others_are_refused() -> None:
    data = _png(28, 28)
    assert image_from_url("data:image/png;base64," + base64.b64encode(data).decode(), "p").data == data
    assert image_from_url("https://example.com/a.png", "p") == ImagePart(None, "p", "https://example.com/a.png")
    with pytest.raises(ApiError, match="data URI .* or http") as other:
        image_from_url("ftp://example.com/a.png", "messages.0.content.1.image_url")
    assert other.value.status == 400 and other.value.param == "messages.0.content.1.image_url"
    with pytest.raises(ApiError, match="not valid base64"):
        image_from_url("data:image/png;base64,@@@", "p")


class _Pictures(BaseHTTPRequestHandler):
    """A PNG at /a.png, a redirect to it, a 404 and a body larger than the tests' limit."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/a.png")
            self.end_headers()
            return
        body = {"/a.png": _png(56, 56), "/big": bytes(4096)}.get(self.path)
        self.send_response(404 if body is None else 200)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pictures() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pictures)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_image_url_is_fetched_within_the_limits_or_refused_in_a_400(pictures: str) -> None:
    fetch = ImageFetch(timeout_s=10, max_bytes=2048)
    for url in (f"{pictures}/a.png", f"{pictures}/moved"):
        prompt, prepared = with_images([IMAGE_TOKEN], [image_from_url(url, "p")], VISION, fetch)
        assert prompt == (IMAGE_TOKEN,) * 4 and prepared[0].grid == (1, 4, 4)
    refusals = {
        "/a.png": (None, "invalid_image_url", "fetches no URLs \\(--image-url-fetch\\)"),
        "/missing": (fetch, "image_fetch_failed", "answered HTTP 404"),
        "/big": (fetch, "image_too_large", "over 2048 bytes"),
    }
    for path, (limits, code, message) in refusals.items():
        with pytest.raises(ApiError, match=message) as refused:
            with_images(
                [IMAGE_TOKEN], [image_from_url(pictures + path, "messages.0.content.0.image_url")], VISION, limits
            )
        assert (refused.value.status, refused.value.code) == (400, code)
        assert refused.value.param == "messages.0.content.0.image_url"
    closed = ImagePart(None, "p", "http://127.0.0.1:9/a.png")  # the discard port: nothing listens
    with pytest.raises(ApiError, match="could not be fetched"):
        with_images([IMAGE_TOKEN], [closed], VISION, fetch)


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
