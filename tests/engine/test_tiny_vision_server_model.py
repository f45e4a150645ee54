"""The tiny Qwen2.5-VL serving directory: loads as a vision model, and its tokenizer and chat template
behave in pooled as in transformers (image parts → one `<|image_pad|>` id between the vision marks,
`<|image_pad|>` spelled by a user stays text)."""

import json
from pathlib import Path

import pytest

from engine.model.families.qwen2_vl.image_processing import ImageRules
from engine.model.loading.loader import load_model
from handlers.generation.prompt import FunctionTool, render_chat
from tests.engine.tiny_vision_server_model import MAX_PIXELS, build_tiny_vision_server_model, token_ids
from text import ChatTemplate, Tokenizer

IMAGE_CHAT = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, {"type": "image"}]}]
IMAGE_BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_vision_server_model(tmp_path_factory.mktemp("tiny_vision_server"))


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_directory(model_dir)


@pytest.fixture(scope="module")
def template(model_dir: Path, tokenizer: Tokenizer) -> ChatTemplate:
    source = json.loads((model_dir / "tokenizer_config.json").read_text())["chat_template"]
    return ChatTemplate(source, tokenizer)


def test_builds_the_same_bytes_twice(tmp_path: Path) -> None:
    first = build_tiny_vision_server_model(tmp_path / "a")
    second = build_tiny_vision_server_model(tmp_path / "b")
    names = sorted(p.name for p in first.iterdir())
    assert names == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_loads_as_a_vision_model(model_dir: Path, tokenizer: Tokenizer, tmp_path: Path) -> None:
    model = load_model(model_dir, cache_dir=tmp_path, progress=False)
    ids = token_ids()
    assert model.config.vision is not None
    assert model.config.image_token_id == ids["<|image_pad|>"] == tokenizer.control_tokens["<|image_pad|>"]
    assert model.config.vocab_size % 64 == 0 and model.config.vocab_size >= tokenizer.vocab_size
    assert model.config.max_position_embeddings == 2048
    assert model.tokenizer_dir == model_dir and model.chat_template is not None
    checkpoint_tokenizer = Tokenizer.for_checkpoint(model.source, model.tokenizer_dir)
    assert checkpoint_tokenizer.eos_token_id == ids["<|im_end|>"]
    assert checkpoint_tokenizer.stop_token_ids == {ids["<|im_end|>"], ids["<|endoftext|>"]}


def test_image_rules_from_the_preprocessor_config(model_dir: Path) -> None:
    rules = ImageRules.from_hf(json.loads((model_dir / "preprocessor_config.json").read_text()))
    assert rules == ImageRules(max_pixels=MAX_PIXELS)
    assert rules.max_pixels // rules.patch_size**2 == 256


def test_an_image_part_renders_one_image_pad(template: ChatTemplate, tokenizer: Tokenizer) -> None:
    ids = token_ids()
    rendered = template.render(IMAGE_CHAT)
    assert rendered.text.count(IMAGE_BLOCK) == 1
    assert rendered.text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
    assert rendered.text.endswith(f"what is this?{IMAGE_BLOCK}<|im_end|>\n<|im_start|>assistant\n")
    assert rendered.token_ids.count(ids["<|image_pad|>"]) == 1
    at = rendered.token_ids.index(ids["<|image_pad|>"])
    assert rendered.token_ids[at - 1 : at + 2] == [ids["<|vision_start|>"], ids["<|image_pad|>"], ids["<|vision_end|>"]]
    # image_url parts (OpenAI's) count as images too, string contents render as text.
    url = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}, {"type": "text"}]}]
    assert template.render(url).text.count(IMAGE_BLOCK) == 1
    assert template.render([{"role": "user", "content": "hi"}]).text.count(IMAGE_BLOCK) == 0
    two = [{"role": "user", "content": [{"type": "image"}, {"type": "image"}]}]
    assert template.render(two, extra_context={"add_vision_id": True}).text.count("Picture 2: <|vision_start|>") == 1


def test_a_spelled_image_pad_stays_text(template: ChatTemplate, tokenizer: Tokenizer) -> None:
    ids = token_ids()
    for content in (
        "look: <|image_pad|>",
        [{"type": "text", "text": "look: <|image_pad|>"}],
        [{"type": "text", "text": "look: <|vision_start|><|image_pad|><|vision_end|>"}],
    ):
        rendered = template.render([{"role": "user", "content": content}])
        assert "<|image_pad|>" in rendered.text
        assert ids["<|image_pad|>"] not in rendered.token_ids
        assert ids["<|vision_start|>"] not in rendered.token_ids
        assert tokenizer.decode(rendered.token_ids).count("<|image_pad|>") == 1


def test_render_chat_passes_image_parts_and_adds_its_tool_section(template: ChatTemplate, tokenizer: Tokenizer) -> None:
    """The template renders no tools, so pooled writes its Hermes section into the system prompt;
    a user message's content list reaches the template as it is."""
    tool = FunctionTool("get_weather", "the weather", {"type": "object", "properties": {}})
    prompt = render_chat(template, tokenizer, IMAGE_CHAT, tools=[tool])
    assert prompt.tool_format.name == "hermes"
    assert prompt.text.count(IMAGE_BLOCK) == 1
    assert "<tools>" in prompt.text and "get_weather" in prompt.text
    assert prompt.token_ids.count(token_ids()["<|image_pad|>"]) == 1


def test_transformers_agrees(model_dir: Path, tokenizer: Tokenizer, template: ChatTemplate) -> None:
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    sample = "What is this? A cat image, and you.\n\n  <tool_call> héllo 123 ü"
    assert hf.encode(sample, add_special_tokens=False) == tokenizer.encode(sample)
    assert hf.eos_token_id == token_ids()["<|im_end|>"]
    hf_text = hf.apply_chat_template(IMAGE_CHAT, tokenize=False, add_generation_prompt=True)
    rendered = template.render(IMAGE_CHAT)
    assert hf_text == rendered.text
    hf_ids = hf.apply_chat_template(IMAGE_CHAT, tokenize=True, add_generation_prompt=True)
    hf_ids = hf_ids["input_ids"] if isinstance(hf_ids, dict) or hasattr(hf_ids, "keys") else hf_ids
    assert list(hf_ids) == rendered.token_ids
