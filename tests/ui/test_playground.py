"""The Playground (/ui/) in a real browser (Debian's chromium, driven by Playwright) against a
real `pooled serve` with the default model and an API key: the page asks for the key, streams
an answer, stops one, sends the sampling fields, shows the server view.

`make test` installs chromium first (`make test-packages`); these tests are skipped, saying why, only
where it still is not there. Playwright's own browser download is never used.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pooled_servers import CONTEXT, DECODE_LANES, SMALL_ENGINE, running_server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEY = "playground-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "playground.png"

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing and could not be installed (run `make test-packages`)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`pooled serve` with the default model and a key; the e2e server's shapes, whose compiled
    programs the persistent XLA cache holds."""
    args = [*SMALL_ENGINE, "--api-key", KEY]
    # Every shape first: a stopped answer must free its lane within seconds, not wait for a compile.
    with running_server(tmp_path_factory, args, AUTH, every_shape=True) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    """A fresh browser context (empty storage) on the Playground, the key given when asked."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(f"{server}/ui/")
    page.wait_for_selector("#key-dialog[open]", timeout=10_000)  # /v1/models answered 401
    page.fill("#key-input", KEY)
    page.click("#key-save")
    sync_api.expect(page.locator("#model-name")).not_to_have_text("", timeout=10_000)
    yield page
    context.close()


def chat_bodies(page: Any) -> list[dict[str, Any]]:
    """The JSON bodies of the chat requests the page sends, in order, as it sends them."""
    bodies: list[dict[str, Any]] = []

    def seen(request: Any) -> None:
        if request.url.endswith("/v1/chat/completions") and request.method == "POST":
            bodies.append({"body": json.loads(request.post_data), "headers": request.headers})

    page.on("request", seen)
    return bodies


def record_answer_lengths(page: Any) -> None:
    """Keep, in the page, every length the last answer's text had while it streamed."""
    page.evaluate(
        """() => {
          window.answerLengths = [];
          new MutationObserver(() => {
            const answers = document.querySelectorAll('.message.assistant .text');
            if (answers.length) window.answerLengths.push(answers[answers.length - 1].textContent.length);
          }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
        }"""
    )


def send(page: Any, text: str) -> None:
    page.fill("#prompt", text)
    page.click("#send")


def last_answer(page: Any) -> Any:
    return page.locator(".message.assistant").last


def test_the_page_asks_for_the_key_then_uses_it(page: Any) -> None:
    assert page.evaluate("localStorage.getItem('pooled.apiKey')") == KEY
    bodies = chat_bodies(page)
    page.fill("#max_tokens", "4")
    send(page, "Hi")
    sync_api.expect(last_answer(page).locator(".figures")).to_contain_text("completion tokens", timeout=60_000)
    assert bodies[0]["headers"]["authorization"] == f"Bearer {KEY}"
    assert "Error" not in last_answer(page).inner_text()


def test_an_answer_streams_in_then_shows_its_figures(page: Any, tmp_path: Path) -> None:
    record_answer_lengths(page)
    page.fill("#max_tokens", "40")
    page.fill("#system", "You are a friendly assistant.")
    send(page, "Tell me about the sea.")
    figures = last_answer(page).locator(".figures")
    sync_api.expect(figures).to_contain_text("completion tokens", timeout=60_000)
    text = figures.inner_text()
    assert "prompt" in text and "first token" in text and "tok/s" in text, text
    lengths = page.evaluate("window.answerLengths")
    growing = sorted({n for n in lengths if n > 0})
    assert len(growing) >= 3, f"the answer did not arrive piece by piece: {lengths}"
    assert len(last_answer(page).locator(".text").inner_text()) == max(growing)
    # Kept in localStorage: a reload shows the same conversation.
    page.reload()
    sync_api.expect(page.locator(".message.user")).to_have_text("Tell me about the sea.")
    sync_api.expect(last_answer(page).locator(".copy")).to_be_visible()
    screenshot = page.screenshot()
    assert distinct_colours(page, screenshot) > 50, "the screenshot looks blank"
    (tmp_path / "playground.png").write_bytes(screenshot)
    if os.environ.get("POOLED_UPDATE_SCREENSHOT"):
        SCREENSHOT.write_bytes(screenshot)


def test_the_sampling_fields_go_into_the_request(page: Any) -> None:
    bodies = chat_bodies(page)
    page.fill("#temperature", "0.3")
    page.fill("#top_k", "20")
    page.fill("#max_tokens", "5")
    page.fill("#seed", "7")
    send(page, "Hello")
    sync_api.expect(last_answer(page).locator(".figures")).to_contain_text("completion tokens", timeout=60_000)
    body = bodies[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["top_k"], body["max_tokens"], body["seed"]) == (0.3, 20, 5, 7)
    assert "top_p" not in body  # left empty: the server's default
    assert body["messages"][-1] == {"role": "user", "content": "Hello"}
    # Regenerate sends the same conversation again and replaces the answer.
    last_answer(page).locator(".regenerate").click()
    sync_api.expect(last_answer(page).locator(".figures")).to_contain_text("completion tokens", timeout=60_000)
    assert len(bodies) == 2 and bodies[1]["body"]["messages"] == body["messages"]
    assert page.locator(".message.assistant").count() == 1


def test_stop_ends_a_long_answer_and_frees_the_lane(page: Any, server: str) -> None:
    record_answer_lengths(page)
    page.fill("#max_tokens", "900")
    page.fill("#temperature", "1")
    send(page, "Write a very long story about a dragon, with many chapters.")
    page.wait_for_function("window.answerLengths.some((n) => n > 20)", timeout=60_000)
    page.click("#stop")
    sync_api.expect(last_answer(page).locator(".figures")).to_contain_text("stopped", timeout=10_000)
    parts = last_answer(page).locator(".figures").inner_text().split(" · ")
    assert "length" not in parts and "stop" not in parts, parts  # cut short, not finished
    stopped_at = last_answer(page).locator(".text").inner_text()
    time.sleep(1.5)
    assert last_answer(page).locator(".text").inner_text() == stopped_at, "the answer kept growing after stop"
    assert page.is_enabled("#send") and not page.is_enabled("#stop")
    # 900 tokens take ~10 s here: the lane is free well before unless the server cancelled it.
    deadline = time.monotonic() + 3
    while (queue := httpx.get(f"{server}/health", headers=AUTH).json()["queue"]) != 0:
        assert time.monotonic() < deadline, f"the request still holds the server: queue {queue}"
        time.sleep(0.2)


def test_the_server_view_shows_the_engine_live(page: Any) -> None:
    page.click("#tab-server")
    cards = page.locator("#server-cards")
    sync_api.expect(cards).to_contain_text("decode lanes", timeout=10_000)
    sync_api.expect(cards.locator(".card", has_text="decode lanes").locator(".value")).to_have_text(str(DECODE_LANES))
    sync_api.expect(cards.locator(".card", has_text="context").locator(".value")).to_have_text(str(CONTEXT))
    sync_api.expect(cards).to_contain_text("KV cache")
    sync_api.expect(page.locator("#histograms figure").first).to_be_visible(timeout=10_000)
    assert page.locator("#histograms figure").count() == 3


def distinct_colours(page: Any, png: bytes) -> int:
    """How many colours the screenshot holds, counted by the browser itself (no image library)."""
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    count: int = page.evaluate(
        """async (url) => {
          const image = new Image();
          image.src = url;
          await image.decode();
          const canvas = document.createElement('canvas');
          canvas.width = image.width; canvas.height = image.height;
          const context = canvas.getContext('2d');
          context.drawImage(image, 0, 0);
          const pixels = context.getImageData(0, 0, image.width, image.height).data;
          const colours = new Set();
          for (let i = 0; i < pixels.length; i += 4) {
            colours.add((pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2]);
          }
          return colours.size;
        }""",
        url,
    )
    return count


WEATHER_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def test_tools_are_sent_and_the_tool_call_is_shown(page: Any) -> None:
    bodies = chat_bodies(page)
    page.click("#advanced summary")
    page.fill("#tools", "not json")
    send(page, "What is the weather in Paris?")
    sync_api.expect(page.locator("#advanced-error")).to_contain_text("tools is not JSON")
    assert bodies == []  # a bad definition is shown, not sent
    page.fill("#tools", json.dumps(WEATHER_TOOL))
    page.select_option("#tool_choice", "required")
    page.fill("#max_tokens", "60")
    page.click("#send")
    sync_api.expect(last_answer(page).locator(".figures")).to_contain_text("completion tokens", timeout=60_000)
    body = bodies[0]["body"]
    assert body["tools"] == WEATHER_TOOL and body["tool_choice"] == "required"
    # The first call (a 135M model under `required` may go on calling).
    sync_api.expect(last_answer(page).locator(".tool-call").first).to_contain_text("get_weather(")


def test_a_json_schema_constrains_the_answer(page: Any) -> None:
    bodies = chat_bodies(page)
    schema = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
    page.click("#advanced summary")
    page.fill("#schema", json.dumps(schema))
    page.fill("#max_tokens", "60")
    send(page, "Name a colour.")
    sync_api.expect(last_answer(page).locator(".figures")).to_contain_text("completion tokens", timeout=60_000)
    assert bodies[0]["body"]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }
    figures = last_answer(page).locator(".figures").inner_text()
    if "stop" in figures:  # finished within max_tokens: the whole answer is the schema's JSON
        assert isinstance(json.loads(last_answer(page).locator(".text").inner_text())["colour"], str)
    else:
        assert last_answer(page).locator(".text").inner_text().startswith("{")


def test_thinking_is_folded_away(page: Any) -> None:
    """The default model does not think: a kept conversation with thinking in it is shown instead."""
    conversation = {
        "id": "kept",
        "title": "Thinking",
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<think>Two and two.</think>4", "stats": {"completion_tokens": 6}},
            {"role": "assistant", "content": "Five.", "reasoning": "Counting again.", "stats": {}},
        ],
    }
    page.evaluate("(c) => localStorage.setItem('pooled.conversations', JSON.stringify([c]))", conversation)
    page.reload()
    answers = page.locator(".message.assistant")
    sync_api.expect(answers.first.locator(".text")).to_have_text("4")
    details = answers.first.locator("details")
    assert details.get_attribute("open") is None  # folded
    assert "Two and two." in (details.text_content() or "")
    assert details.inner_text() == "Thinking"  # only the summary shows
    assert "Counting again." in (answers.last.locator("details").text_content() or "")
    assert answers.last.locator(".text").inner_text() == "Five."
