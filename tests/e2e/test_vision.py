"""Image chats against `pooled serve --model <a tiny random Qwen2.5-VL directory>` through the OpenAI
SDK (Chat Completions, Responses) and the Anthropic SDK; and a text-only model refusing images.

The model's weights are random: the tests check what the server reports (usage, token counts,
cache hits, errors), not what the model says.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import anthropic
import httpx
import numpy as np
import pytest
from openai import BadRequestError, OpenAI
from PIL import Image

from tests.engine.tiny_vision_server_model import build_tiny_vision_server_model
from tests.pooled_servers import SMALL_ENGINE, running_server
from tools.vision_gguf import write_pair


def _png(width: int, height: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def _data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


# 112 × 84 pixels: a 8 × 6 grid of 14-pixel patches, 12 image tokens.
IMAGE = _png(112, 84, seed=1)
OTHER_IMAGE = _png(112, 84, seed=2)
IMAGE_TOKENS = 12


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = build_tiny_vision_server_model(tmp_path_factory.mktemp("vlm") / "model")
    # Every shape compiled: the GGUF pair's server (below) answers on the same shapes, greedy.
    args = [*SMALL_ENGINE, "--model", str(model), "--max-images", "2"]
    with running_server(tmp_path_factory, args, every_shape=True) as base:
        yield base


def _chat_messages(image: bytes, text: str = "What is in this picture?") -> list[dict]:
    return [
        {
            "role": "user",
            "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": _data_uri(image)}}],
        }
    ]


def test_an_image_chat_through_the_openai_sdk_counts_the_images_tokens_and_hits_the_cache_again(
    vision_server: str,
) -> None:
    client = OpenAI(base_url=f"{vision_server}/v1", api_key="none")
    messages = _chat_messages(IMAGE)
    first = client.chat.completions.create(model="any", messages=messages, max_tokens=3, temperature=0)
    tokenized = httpx.post(f"{vision_server}/v1/tokenize", json={"messages": messages}, timeout=60).json()
    assert first.usage is not None and first.usage.prompt_tokens == tokenized["count"]
    text_only = httpx.post(
        f"{vision_server}/v1/tokenize",
        json={"messages": [{"role": "user", "content": "What is in this picture?"}]},
        timeout=60,
    ).json()
    # The image's tokens (12) and its two markers, beside the same text.
    assert tokenized["count"] - text_only["count"] == IMAGE_TOKENS + 2
    again = client.chat.completions.create(model="any", messages=messages, max_tokens=3, temperature=0)
    assert again.choices[0].message.content == first.choices[0].message.content
    details = again.usage.prompt_tokens_details if again.usage else None
    assert details is not None and (details.cached_tokens or 0) > IMAGE_TOKENS
    other = client.chat.completions.create(model="any", messages=_chat_messages(OTHER_IMAGE), max_tokens=1)
    other_details = other.usage.prompt_tokens_details if other.usage else None
    assert other_details is None or (other_details.cached_tokens or 0) < tokenized["count"] - IMAGE_TOKENS


def test_an_image_through_the_responses_api(vision_server: str) -> None:
    client = OpenAI(base_url=f"{vision_server}/v1", api_key="none")
    answer = client.responses.create(
        model="any",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Describe it."},
                    {"type": "input_image", "image_url": _data_uri(IMAGE), "detail": "auto"},
                ],
            }
        ],
        max_output_tokens=3,
    )
    assert answer.status in ("completed", "incomplete")
    assert answer.usage is not None and answer.usage.input_tokens > IMAGE_TOKENS


def test_an_image_through_the_anthropic_sdk_and_count_tokens_agree(vision_server: str) -> None:
    client = anthropic.Anthropic(base_url=vision_server, api_key="none")
    messages = [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(IMAGE).decode()},
                },
                {"type": "text", "text": "What is this?"},
            ],
        }
    ]
    answer = client.messages.create(model="any", messages=messages, max_tokens=3)  # type: ignore[arg-type]
    counted = client.messages.count_tokens(model="any", messages=messages)  # type: ignore[arg-type]
    # Anthropic's input_tokens leave out the tokens read from the cache (the first test's prompt shares a prefix).
    assert answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0) == counted.input_tokens
    assert counted.input_tokens > IMAGE_TOKENS


def test_a_message_spelling_the_image_token_keeps_it_as_text(vision_server: str) -> None:
    """Were `<|image_pad|>` in the text taken for the control token, the prompt would hold two
    images' places for one image: a 400."""
    client = OpenAI(base_url=f"{vision_server}/v1", api_key="none")
    messages = _chat_messages(IMAGE, text="Is <|image_pad|> or <|vision_start|> here?")
    answer = client.chat.completions.create(model="any", messages=messages, max_tokens=1)
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_bad_images_are_400s_naming_the_part(vision_server: str) -> None:
    client = OpenAI(base_url=f"{vision_server}/v1", api_key="none")
    fetched = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]
    with pytest.raises(BadRequestError) as refused:
        client.chat.completions.create(model="any", messages=fetched, max_tokens=1)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "messages.0.content.0.image_url"  # type: ignore[index]
    broken = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _data_uri(b"not an image")}}]}]
    with pytest.raises(BadRequestError, match="cannot be used"):
        client.chat.completions.create(model="any", messages=broken, max_tokens=1)  # type: ignore[arg-type]
    three = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _data_uri(IMAGE)}}] * 3}]
    with pytest.raises(BadRequestError, match="at most 2"):
        client.chat.completions.create(model="any", messages=three, max_tokens=1)  # type: ignore[arg-type]


def test_a_text_only_model_refuses_an_image_in_each_apis_shape(server: str) -> None:
    openai_client = OpenAI(base_url=f"{server}/v1", api_key="none")
    with pytest.raises(BadRequestError, match="takes no images"):
        openai_client.chat.completions.create(model="any", messages=_chat_messages(IMAGE), max_tokens=1)  # type: ignore[arg-type]
    anthropic_client = anthropic.Anthropic(base_url=server, api_key="none")
    block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(IMAGE).decode()},
    }
    with pytest.raises(anthropic.BadRequestError, match="takes no images"):
        anthropic_client.messages.create(
            model="any",
            messages=[{"role": "user", "content": [block]}],
            max_tokens=1,  # type: ignore[list-item]
        )


def test_llama_cpps_gguf_pair_answers_as_the_safetensors_folder(
    vision_server: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same model as a language GGUF and its mmproj GGUF, given as llama-server takes them
    (`--model … --mmproj …`): the same prompt tokens and the same greedy answer to an image chat."""
    folder = build_tiny_vision_server_model(tmp_path_factory.mktemp("vlm-pair") / "model")
    language, mmproj = write_pair(folder, tmp_path_factory.mktemp("pair"))
    messages = _chat_messages(OTHER_IMAGE, text="What is in this one?")
    answers = []
    args = [*SMALL_ENGINE, "--model", str(language), "--mmproj", str(mmproj)]
    with running_server(tmp_path_factory, args, every_shape=True) as pair:
        for base in (vision_server, pair):
            client = OpenAI(base_url=f"{base}/v1", api_key="none")
            answers.append(client.chat.completions.create(model="any", messages=messages, max_tokens=4, temperature=0))
    (folder_answer, pair_answer) = answers
    assert pair_answer.usage is not None and folder_answer.usage is not None
    assert pair_answer.usage.prompt_tokens == folder_answer.usage.prompt_tokens
    assert pair_answer.choices[0].message.content == folder_answer.choices[0].message.content
