"""Text <-> token ids for one model, with user text never becoming control tokens."""

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as BackendTokenizer

from engine.checkpoints import read_gguf_metadata, tokenizer_from_gguf
from engine.errors import CheckpointError

# Control tokens that end a turn in common chat formats; generation stops on any the vocabulary has,
# as llama.cpp does, besides the model's own end-of-sequence token.
END_OF_TURN_TOKENS = frozenset(
    {
        "<|im_end|>",
        "<|endoftext|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|end_of_text|>",
        "<|end|>",
        "<end_of_turn>",
        "<|return|>",
        "<|call|>",
    }
)


class Tokenizer:
    """A model's tokenizer.

    `encode` treats its input as plain text: a control token spelled in it (`<|im_start|>`) is
    tokenized as ordinary characters, like transformers' `split_special_tokens=True`. Only chat
    templates produce control tokens, through `control_tokens`.
    """

    def __init__(
        self,
        backend: BackendTokenizer,
        *,
        bos_token_id: int | None,
        eos_token_ids: Iterable[int],
    ) -> None:
        self._plain = BackendTokenizer.from_str(backend.to_str())
        self._plain.encode_special_tokens = True
        self._backend = backend
        self.control_tokens: Mapping[str, int] = {
            token.content: token_id for token_id, token in backend.get_added_tokens_decoder().items() if token.special
        }
        self.bos_token_id = bos_token_id
        eos_ids = list(eos_token_ids)
        self.eos_token_id: int | None = eos_ids[0] if eos_ids else None
        end_of_turn = {self.control_tokens[t] for t in END_OF_TURN_TOKENS if t in self.control_tokens}
        self.stop_token_ids: frozenset[int] = frozenset(eos_ids) | end_of_turn

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any]) -> "Tokenizer":
        eos = metadata.get("tokenizer.ggml.eos_token_id")
        extra_stops = [
            metadata[k] for k in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id") if k in metadata
        ]
        return cls(
            tokenizer_from_gguf(metadata),
            bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=([eos] if eos is not None else []) + extra_stops,
        )

    @classmethod
    def from_gguf_file(cls, path: Path) -> "Tokenizer":
        return cls.from_gguf_metadata(read_gguf_metadata(path, prefix="tokenizer."))

    @classmethod
    def from_directory(cls, directory: Path) -> "Tokenizer":
        """A Hugging Face model directory: `tokenizer.json` plus the special tokens its configs name."""
        tokenizer_file = directory / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise CheckpointError(f"{directory}: no tokenizer.json")
        backend = BackendTokenizer.from_file(str(tokenizer_file))
        tokenizer_config = _read_json(directory / "tokenizer_config.json")
        eos_ids = _token_ids(_read_json(directory / "generation_config.json").get("eos_token_id"))
        eos_ids += _token_ids(_read_json(directory / "config.json").get("eos_token_id"))
        eos_text = _token_text(tokenizer_config.get("eos_token"))
        eos_id = backend.token_to_id(eos_text) if eos_text is not None else None
        if eos_id is not None:
            eos_ids.insert(0, eos_id)
        bos_text = _token_text(tokenizer_config.get("bos_token"))
        return cls(
            backend,
            bos_token_id=backend.token_to_id(bos_text) if bos_text is not None else None,
            eos_token_ids=dict.fromkeys(eos_ids),
        )

    @classmethod
    def for_checkpoint(cls, source: Path, tokenizer_dir: Path | None) -> "Tokenizer":
        """The tokenizer a checkpoint ships: a GGUF file's own vocabulary, or the tokenizer.json
        beside safetensors weights (`tokenizer_dir`)."""
        if source.suffix == ".gguf":
            return cls.from_gguf_file(source)
        if tokenizer_dir is None:
            raise CheckpointError(f"{source}: no tokenizer.json next to the weights")
        return cls.from_directory(tokenizer_dir)

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def bos_token(self) -> str | None:
        return self.token_text(self.bos_token_id)

    @property
    def eos_token(self) -> str | None:
        return self.token_text(self.eos_token_id)

    def to_json(self) -> str:
        """The `tokenizer.json` form of this tokenizer (what llguidance builds its own from)."""
        json_text: str = self._backend.to_str()
        return json_text

    def token_text(self, token_id: int | None) -> str | None:
        return None if token_id is None else self._backend.id_to_token(token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Plain-text ids; `add_special_tokens` adds what the model wraps a sequence in (e.g. BOS)."""
        ids: list[int] = self._plain.encode(text, add_special_tokens=add_special_tokens).ids
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        text: str = self._backend.decode(ids, skip_special_tokens=skip_special_tokens)
        return text


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable JSON ({error})") from error
    return content if isinstance(content, dict) else {}


def _token_ids(value: object) -> list[int]:
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def _token_text(value: object) -> str | None:
    """tokenizer_config.json spells a special token as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
