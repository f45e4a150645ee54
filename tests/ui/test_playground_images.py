"""The Playground (/ui/) attaches an image to a chat message, in a real browser (Debian's chromium,
driven by Playwright) against `pooled serve` on a tiny random Qwen2.5-VL directory with an API key:
the image is read as a data URI, sent as an `image_url` part after the text, shown in the user's
bubble, and resent with the conversation on the next turn; a refused image shows as an error.

The model's weights are random: the tests check what the page sends and shows, not what the model
says. Skipped, saying why, where chromium or Playwright is missing (as tests/ui/test_playground.py).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.engine.tiny_vision_server_model import build_tiny_vision_server_model
from tests.pooled_servers import SMALL_ENGINE, running_server
from tests.ui import test_playground as playground
from tests.ui.test_playground import AUTH, KEY, chat_bodies, last_answer, send, sync_api

# test_playground's fixtures: chromium, and a fresh page on /ui/ with the key entered (on `server`
# below, the vision model).
browser = playground.browser
page = playground.page

THIS_MODEL_TAKES_NO_IMAGES = "This model takes no images"


def _png(width: int, height: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


IMAGE = _png(112, 84, seed=1)
IMAGE_URL = "data:image/png;base64," + base64.b64encode(IMAGE).decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`pooled serve` on the tiny vision model, with a key (the `page` fixture enters it)."""
    model = build_tiny_vision_server_model(tmp_path_factory.mktemp("vlm") / "model")
    args = ["--model", str(model), *SMALL_ENGINE, "--api-key", KEY]  # tests/e2e/test_vision.py's shapes
    with running_server(tmp_path_factory, args, AUTH) as base:
        yield base


def attach(page: Any, name: str = "a.png", data: bytes = IMAGE, mime: str = "image/png") -> None:
    page.set_input_files("#attach", files=[{"name": name, "mimeType": mime, "buffer": data}])


def image_parts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    assert isinstance(content, list), message
    return [part["image_url"]["url"] for part in content if part["type"] == "image_url"]


def test_an_attached_image_is_sent_shown_and_resent(page: Any) -> None:
    bodies = chat_bodies(page)
    page.fill("#max_tokens", "8")
    sync_api.expect(page.locator("label[for=attach]")).to_be_visible()
    attach(page)
    thumb = page.locator("#attachment-thumb")
    sync_api.expect(thumb).to_be_visible()
    assert thumb.get_attribute("src") == IMAGE_URL
    with page.expect_request(lambda r: r.url.endswith("/v1/chat/completions") and r.method == "POST") as sent:
        send(page, "What is in this picture?")
    first = json.loads(sent.value.post_data)["messages"]
    assert first[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
        ],
    }
    assert base64.b64decode(image_parts(first[-1])[0].split(",", 1)[1]) == IMAGE
    sync_api.expect(page.locator("#attachment")).to_be_hidden()  # sent: the box is clear again
    user = page.locator(".message.user").last
    sync_api.expect(user.locator("img")).to_have_attribute("src", IMAGE_URL)
    sync_api.expect(user.locator(".text")).to_have_text("What is in this picture?")
    figures = last_answer(page).locator(".figures")
    sync_api.expect(figures).to_contain_text("completion tokens", timeout=60_000)
    assert "Error" not in last_answer(page).inner_text()
    answer = last_answer(page).locator(".text").inner_text()
    assert answer.strip() or "stop" in figures.inner_text(), figures.inner_text()

    # The next turn resends the conversation, the image with it; the new message is text only.
    send(page, "And its colours?")
    sync_api.expect(page.locator(".message.assistant")).to_have_count(2)
    sync_api.expect(last_answer(page).locator(".figures")).to_contain_text("completion tokens", timeout=60_000)
    assert len(bodies) == 2
    second = bodies[1]["body"]["messages"]
    assert second[0] == first[-1]
    assert second[1]["role"] == "assistant"
    assert second[-1] == {"role": "user", "content": "And its colours?"}
    # Kept with the conversation: a reload shows the thumbnail again.
    page.reload()
    sync_api.expect(page.locator(".message.user").first.locator("img")).to_have_attribute("src", IMAGE_URL)


def test_an_image_can_be_removed_and_a_refusal_shows_as_an_error(page: Any) -> None:
    """The refusal a text-only model gives (a 400) is answered by the page's route, not a second server."""
    attach(page, "notes.txt", b"not an image", "text/plain")
    sync_api.expect(page.locator("#attach-error")).to_contain_text("not a PNG, JPEG, GIF or WebP image")
    sync_api.expect(page.locator("#attachment")).to_be_hidden()
    attach(page)
    sync_api.expect(page.locator("#attach-error")).to_have_text("")
    sync_api.expect(page.locator("#attachment")).to_be_visible()
    page.click("#attachment-remove")
    sync_api.expect(page.locator("#attachment")).to_be_hidden()

    refusal = {"error": {"message": f"{THIS_MODEL_TAKES_NO_IMAGES} (pooled-text)", "type": "invalid_request_error"}}
    page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(status=400, content_type="application/json", body=json.dumps(refusal)),
    )
    bodies = chat_bodies(page)
    attach(page, "b.png")
    sync_api.expect(page.locator("#attachment")).to_be_visible()
    send(page, "Describe it.")
    error = page.locator(".message.assistant.error")
    sync_api.expect(error).to_contain_text(THIS_MODEL_TAKES_NO_IMAGES, timeout=10_000)
    assert image_parts(bodies[0]["body"]["messages"][-1]) == [IMAGE_URL]
    assert page.is_enabled("#send")
