"""A tiny random Qwen2.5-VL model directory to serve in end-to-end tests, rebuilt bit for bit from
fixed seeds with numpy and `tokenizers` (no torch).

Laid out as a Qwen/Qwen2.5-VL-*-Instruct directory on the Hub: config.json (the tiny tower and
decoder of `TINY_VISION_MODELS["qwen2_5_vl"]`, with the tokenizer's real ids), a byte-level BPE
tokenizer.json built as transformers' `Qwen2Tokenizer` builds one (NFC, Qwen2's split regex, byte
level) with Qwen2's added tokens in their order, tokenizer_config.json carrying Qwen2-VL's chat
template (content lists, `<|vision_start|><|image_pad|><|vision_end|>` per image, no tools: pooled
adds its own Hermes-style tool section), generation_config.json, preprocessor_config.json with a
small `max_pixels` (at most 256 patches, 64 image tokens an image) and model.safetensors.
"""

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from tests.engine.tiny_checkpoints import SEED
from tests.engine.tiny_vision_checkpoints import TINY_VISION_MODELS, write_vision_checkpoint

# transformers' Qwen2Tokenizer pre-tokenizer pattern (the one in Qwen2/2.5's tokenizer.json).
_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# A few merges over the byte alphabet ("Ġ" is the byte-level space), enough that common words are
# one or two tokens; each one adds its joined token to the vocabulary, in this order.
_MERGES: tuple[tuple[str, str], ...] = (
    ("Ġ", "t"),
    ("h", "e"),
    ("i", "n"),
    ("Ġ", "a"),
    ("r", "e"),
    ("o", "n"),
    ("e", "r"),
    ("Ġ", "s"),
    ("a", "t"),
    ("Ġ", "w"),
    ("o", "u"),
    ("i", "s"),
    ("Ġ", "i"),
    ("e", "n"),
    ("i", "t"),
    ("Ġ", "c"),
    ("Ġ", "o"),
    ("e", "s"),
    ("o", "r"),
    ("Ġt", "he"),
    ("Ġ", "h"),
    ("Ġ", "b"),
    ("Ġ", "m"),
    ("Ġ", "p"),
    ("a", "n"),
    ("in", "g"),
    ("Ġ", "d"),
    ("Ġ", "f"),
    ("Ġw", "h"),
    ("Ġwh", "at"),
    ("Ġi", "s"),
    ("Ġt", "h"),
    ("Ġth", "is"),
    ("Ġ", "y"),
    ("Ġy", "ou"),
    ("Ġa", "n"),
    ("Ġan", "d"),
    ("Ġ", "I"),
    ("Ġ", "l"),
    ("Ġ", "g"),
    ("Ġ", "n"),
    ("a", "l"),
    ("l", "l"),
    ("Ġc", "at"),
    ("Ġ", "r"),
    ("Ġ", "e"),
    ("a", "g"),
    ("ag", "e"),
    ("Ġi", "m"),
    ("Ġim", "age"),
    ("t", "h"),
    ("th", "is"),
)

# Qwen2's added tokens, in the Hub's order (151643 onwards there), and whether each is special.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)

# Qwen2-VL's chat template (chat_template.json of Qwen/Qwen2-VL- and Qwen2.5-VL-*-Instruct).
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# 112 × 112 × 4 pixels: at most 256 patches of 14 × 14, 64 image tokens an image.
MAX_PIXELS = 112 * 112 * 4
MIN_PIXELS = 56 * 56


def _byte_alphabet() -> list[str]:
    """The byte-level alphabet in byte order (GPT-2's bytes_to_unicode)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            shifted[byte] = chr(byte)
        else:
            shifted[byte] = chr(256 + extra)
            extra += 1
    return [shifted[byte] for byte in range(256)]


def _base_vocab() -> dict[str, int]:
    vocab = {token: i for i, token in enumerate(_byte_alphabet())}
    for left, right in _MERGES:
        assert left in vocab and right in vocab, (left, right)
        vocab.setdefault(left + right, len(vocab))
    return vocab


def token_ids() -> dict[str, int]:
    """Every added token's id."""
    base = len(_base_vocab())
    return {token: base + i for i, (token, _) in enumerate(ADDED_TOKENS)}


def tokenizer_json() -> str:
    vocab = _base_vocab()
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=list(_MERGES),
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    for token, special in ADDED_TOKENS:  # one at a time, so ids follow ADDED_TOKENS' order
        tokenizer.add_tokens([AddedToken(token, special=special, normalized=False)])
    assert tokenizer.get_vocab_size(with_added_tokens=True) == len(vocab) + len(ADDED_TOKENS)
    return tokenizer.to_str()


def server_config() -> dict[str, Any]:
    """config.json: the tiny Qwen2.5-VL with the tokenizer's ids and room for a few images."""
    ids = token_ids()
    vocab = len(_base_vocab()) + len(ADDED_TOKENS)
    return {
        **TINY_VISION_MODELS["qwen2_5_vl"],
        "vocab_size": -(-vocab // 64) * 64,
        "max_position_embeddings": 2048,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "vision_token_id": ids["<|vision_pad|>"],
    }


def build_tiny_vision_server_model(directory: Path) -> Path:
    """Writes the tiny Qwen2.5-VL serving directory into `directory` (created if missing)."""
    config = server_config()
    ids = token_ids()
    write_vision_checkpoint(config, directory, SEED + 10)
    (directory / "tokenizer.json").write_text(tokenizer_json())
    added = {
        str(ids[token]): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for token, special in ADDED_TOKENS
    }
    tokenizer_config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [t for t, special in ADDED_TOKENS if special and t != "<|endoftext|>"],
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": config["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    generation_config = {
        "bos_token_id": ids["<|endoftext|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
    }
    (directory / "generation_config.json").write_text(json.dumps(generation_config, indent=2))
    vision = config["vision_config"]
    preprocessor_config = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "min_pixels": MIN_PIXELS,
        "max_pixels": MAX_PIXELS,
        "patch_size": vision["patch_size"],
        "temporal_patch_size": vision["temporal_patch_size"],
        "merge_size": vision["spatial_merge_size"],
    }
    (directory / "preprocessor_config.json").write_text(json.dumps(preprocessor_config, indent=2))
    return directory
