"""Whisper's special tokens, languages and token bytes, read from the checkpoint's tokenizer.json.

Whisper's tokenizer is GPT-2's byte-level BPE; its special tokens (end of text, start of
transcript, the languages, the tasks, no-timestamps) follow the text tokens, and the timestamp
tokens (`<|0.00|>` … `<|30.00|>`, 0.02 s apart) follow those up to the model's vocabulary size,
whether or not tokenizer.json lists them.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from engine.errors import CheckpointError
from engine.model.families.whisper.whisper_config import AlignmentHeads

# openai-whisper's and CTranslate2's test of a multilingual model: English-only ones have one
# token fewer (their text vocabulary lacks one token).
MULTILINGUAL_VOCAB_SIZE = 51865
TIMESTAMP_STEP = 0.02  # seconds a timestamp token stands for


@dataclass(frozen=True)
class WhisperVocabulary:
    eot: int
    sot: int
    sot_prev: int
    sot_lm: int
    no_speech: int
    no_timestamps: int
    transcribe: int
    translate: int
    timestamp_begin: int  # `<|0.00|>`; every id from it on is a timestamp
    languages: Mapping[str, int]  # language code → its token; empty for an English-only model
    suppress_tokens: tuple[int, ...]  # never drawn (non-speech symbols)
    begin_suppress: tuple[int, ...]  # never drawn as a window's first token
    token_bytes: tuple[bytes, ...]  # each id's bytes (a special or timestamp token's name)
    alignment_heads: AlignmentHeads  # (decoder layer, head), as WhisperConfig has them

    @property
    def multilingual(self) -> bool:
        return bool(self.languages)


@cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character each byte is written as."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _bytes(token: str, byte_of_char: Mapping[str, int], tokenizer_json: Path) -> bytes:
    try:
        return bytes(byte_of_char[ch] for ch in token)
    except KeyError:
        raise CheckpointError(
            f"{tokenizer_json}: token {token!r} is not byte-level BPE, so it is not Whisper's"
        ) from None


def read_vocabulary(
    tokenizer_json: Path,
    vocab_size: int,
    multilingual: bool | None,
    suppress_tokens: Sequence[int],
    begin_suppress: Sequence[int],
    alignment_heads: AlignmentHeads,
) -> WhisperVocabulary:
    """The vocabulary of a model with `vocab_size` logits; `multilingual` as the checkpoint
    declares it, or None to decide by the vocabulary's size."""
    try:
        tokenizer = json.loads(tokenizer_json.read_text())
        text_tokens: Mapping[str, int] = tokenizer["model"]["vocab"]
        added = {str(t["content"]): int(t["id"]) for t in tokenizer.get("added_tokens", [])}
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise CheckpointError(f"{tokenizer_json} is not a readable tokenizer.json ({error})") from None
    ids = {**text_tokens, **added}

    def special(*names: str) -> int:
        for name in names:
            if name in ids:
                return int(ids[name])
        raise CheckpointError(f"{tokenizer_json} has no {names[0]} token, so it is not Whisper's")

    sot, translate = special("<|startoftranscript|>"), special("<|translate|>")
    if multilingual is None:
        multilingual = vocab_size >= MULTILINGUAL_VOCAB_SIZE
    # An English-only model's tokenizer lists the language tokens too, but its model never learnt them.
    languages = {name[2:-2]: token for name, token in added.items() if sot < token < translate} if multilingual else {}
    no_timestamps = special("<|notimestamps|>")
    timestamp_begin = no_timestamps + 1
    byte_of_char = _byte_of_char()
    token_bytes = [b""] * vocab_size
    for name, token in ids.items():
        if 0 <= token < vocab_size:
            token_bytes[token] = name.encode() if name in added else _bytes(name, byte_of_char, tokenizer_json)
    for token in range(timestamp_begin, vocab_size):
        token_bytes[token] = f"<|{(token - timestamp_begin) * TIMESTAMP_STEP:.2f}|>".encode()
    return WhisperVocabulary(
        eot=special("<|endoftext|>"),
        sot=sot,
        sot_prev=special("<|startofprev|>"),
        sot_lm=special("<|startoflm|>"),
        no_speech=special("<|nospeech|>", "<|nocaptions|>"),
        no_timestamps=no_timestamps,
        transcribe=special("<|transcribe|>"),
        translate=translate,
        timestamp_begin=timestamp_begin,
        languages=languages,
        suppress_tokens=tuple(int(t) for t in suppress_tokens),
        begin_suppress=tuple(int(t) for t in begin_suppress),
        token_bytes=tuple(token_bytes),
        alignment_heads=alignment_heads,
    )
