"""Build a `tokenizers.Tokenizer` from the vocabulary a GGUF file carries in its metadata.

A GGUF has no `tokenizer.json`: it stores tokens, merges, token types and llama.cpp's name for the
pre-tokenizer (`tokenizer.ggml.pre`). The pre-tokenizer splits below follow llama.cpp's
`llama-vocab.cpp`, which is what a GGUF's producer tested the vocabulary with.
"""

from collections.abc import Mapping
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as BackendTokenizer

from engine.errors import CheckpointError

# llama.cpp token types (`tokenizer.ggml.token_type`).
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
TOKEN_TYPE_UNUSED = 5  # padding to the model's vocabulary size ("[PAD151665]")

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (  # Qwen2's tokenizer.json splits text so before its byte-level BPE
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# tokenizer.ggml.pre -> regex applied before byte-level BPE; llama-bpe style files also take a whole
# word from the vocabulary before trying merges (llama.cpp's `ignore_merges`).
_BPE_SPLITS: dict[str, tuple[str, bool]] = {
    "llama3": (_LLAMA3_SPLIT, True),
    "llama-v3": (_LLAMA3_SPLIT, True),
    "llama-bpe": (_LLAMA3_SPLIT, True),
    "smaug-bpe": (_LLAMA3_SPLIT, False),
    "dbrx": (_LLAMA3_SPLIT, False),
    "qwen2": (QWEN2_SPLIT, False),
    "deepseek-r1-qwen": (QWEN2_SPLIT, False),
}

# Pre-tokenizer names whose split is GPT-2's, optionally with each digit on its own. Files older
# than `tokenizer.ggml.pre` ("default") get GPT-2's split too, as transformers gives them.
_GPT2_SPLITS = {"default": False, "gpt2": False, "smollm": True, "starcoder": True}


def tokenizer_from_gguf(metadata: Mapping[str, Any]) -> BackendTokenizer:
    """The tokenizer a GGUF's `tokenizer.ggml.*` metadata describes, control tokens included."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind == "gpt2":
        tokenizer = _byte_level_bpe(metadata)
    elif kind == "llama":
        tokenizer = _sentencepiece_bpe(metadata)
    else:
        raise CheckpointError(f"GGUF tokenizer model {kind!r} is not supported (supported: gpt2, llama)")
    _add_marked_tokens(tokenizer, metadata)
    if _add_bos(metadata):
        bos = metadata["tokenizer.ggml.tokens"][metadata["tokenizer.ggml.bos_token_id"]]
        bos_id = metadata["tokenizer.ggml.bos_token_id"]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    return tokenizer


def _add_bos(metadata: Mapping[str, Any]) -> bool:
    # llama.cpp adds BOS to sentencepiece vocabularies unless the file says otherwise.
    default = metadata.get("tokenizer.ggml.model") == "llama"
    wanted = bool(metadata.get("tokenizer.ggml.add_bos_token", default))
    return wanted and "tokenizer.ggml.bos_token_id" in metadata


def _byte_level_bpe(metadata: Mapping[str, Any]) -> BackendTokenizer:
    pre = metadata.get("tokenizer.ggml.pre", "default")
    split, ignore_merges = _BPE_SPLITS.get(pre, (None, False))
    vocab = {token: index for index, token in enumerate(metadata["tokenizer.ggml.tokens"])}
    merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    tokenizer = BackendTokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    if split is not None:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    elif pre in _GPT2_SPLITS:
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        steps = [pre_tokenizers.Digits(individual_digits=True), byte_level] if _GPT2_SPLITS[pre] else [byte_level]
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    else:
        raise CheckpointError(f"GGUF pre-tokenizer {pre!r} is not supported")
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece_bpe(metadata: Mapping[str, Any]) -> BackendTokenizer:
    """SentencePiece BPE with byte fallback, the way llama.cpp runs a `llama` vocabulary."""
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    vocab = {token: index for index, token in enumerate(tokens)}
    if "tokenizer.ggml.merges" in metadata:
        merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    else:
        merges = _merges_from_scores(tokens, metadata["tokenizer.ggml.scores"], vocab)
    unk_id = metadata.get("tokenizer.ggml.unknown_token_id")
    tokenizer = BackendTokenizer(
        models.BPE(
            vocab,
            merges,
            unk_token=tokens[unk_id] if unk_id is not None else None,
            byte_fallback=True,
            fuse_unk=True,
        )
    )
    space_prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    prepend: list[normalizers.Normalizer] = [normalizers.Prepend("\u2581")] if space_prefix else []
    tokenizer.normalizer = normalizers.Sequence([*prepend, normalizers.Replace(" ", "\u2581")])
    strip_prefix: list[decoders.Decoder] = [decoders.Strip(" ", 1, 0)] if space_prefix else []
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), *strip_prefix]
    )
    return tokenizer


def _merges_from_scores(tokens: list[str], scores: list[float], vocab: dict[str, int]) -> list[tuple[str, str]]:
    """SentencePiece BPE merges pieces in the order of the merged piece's score, best first."""
    candidates = [
        (-score, vocab[token[:cut]], vocab[token[cut:]], token[:cut], token[cut:])
        for token, score in zip(tokens, scores, strict=True)
        for cut in range(1, len(token))
        if token[:cut] in vocab and token[cut:] in vocab
    ]
    return [(left, right) for *_, left, right in sorted(candidates)]


def _add_marked_tokens(tokenizer: BackendTokenizer, metadata: Mapping[str, Any]) -> None:
    """Make control tokens special and user-defined ones whole, as llama.cpp matches both in text;
    unused ones special too, so that they decode to nothing, as llama.cpp's pieces of them are."""
    tokens = metadata["tokenizer.ggml.tokens"]
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, kind in zip(tokens, types, strict=True)
            if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNUSED)
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, kind in zip(tokens, types, strict=True)
            if kind == TOKEN_TYPE_USER_DEFINED
        ]
    )


def wordpiece_from_gguf(metadata: Mapping[str, Any]) -> BackendTokenizer:
    """A BERT vocabulary (`tokenizer.ggml.model` "bert") as Hugging Face's WordPiece tokenizer.

    llama.cpp's converter stores it in "phantom space": a piece that starts a word gains U+2581
    and a continuation loses its `##`, control tokens stay as they are. Undone here, with BERT's
    lower-casing normaliser (llama.cpp's WordPiece always lower-cases) and [CLS] … [SEP] around
    each input; a pair's second segment has token type 1.
    """
    if metadata.get("tokenizer.ggml.model") != "bert":
        raise CheckpointError(f"GGUF tokenizer model {metadata.get('tokenizer.ggml.model')!r} is not WordPiece (bert)")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    pieces = [
        token if kind == TOKEN_TYPE_CONTROL else token[1:] if token.startswith("\u2581") else f"##{token}"
        for token, kind in zip(tokens, types, strict=True)
    ]
    vocab = {piece: index for index, piece in reversed(list(enumerate(pieces)))}  # the first id of a duplicate

    def special(key: str, text: str, default: int) -> int:
        return int(metadata.get(key, vocab.get(text, default)))

    unk = special("tokenizer.ggml.unknown_token_id", "[UNK]", 100)
    # llama.cpp's defaults for a WordPiece vocabulary: [CLS] is its BOS, [SEP] its separator.
    cls, sep = (
        special("tokenizer.ggml.bos_token_id", "[CLS]", 101),
        special("tokenizer.ggml.seperator_token_id", "[SEP]", 102),
    )
    tokenizer = BackendTokenizer(models.WordPiece(vocab, unk_token=pieces[unk]))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.add_special_tokens(
        [
            AddedToken(p, special=True, normalized=False)
            for p, kind in zip(pieces, types, strict=True)
            if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNUSED)
        ]
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{pieces[cls]} $A {pieces[sep]}",
        pair=f"{pieces[cls]} $A {pieces[sep]} $B:1 {pieces[sep]}:1",
        special_tokens=[(pieces[cls], cls), (pieces[sep], sep)],
    )
    return tokenizer


def unigram_from_gguf(metadata: Mapping[str, Any]) -> BackendTokenizer:
    """An XLM-RoBERTa vocabulary (`tokenizer.ggml.model` "t5": SentencePiece Unigram) as the
    tokenizer.json transformers writes for it: the precompiled normalisation map where the file has
    one, runs of spaces squeezed (`remove_extra_whitespaces`), U+2581 for each space and before
    each input (`add_space_prefix`), and <s> A </s> around one input, <s> A </s> </s> B </s>
    around a pair (the separator is </s>, as llama-server's rerank prompt has it).
    """
    if metadata.get("tokenizer.ggml.model") != "t5":
        raise CheckpointError(f"GGUF tokenizer model {metadata.get('tokenizer.ggml.model')!r} is not Unigram (t5)")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    scores: list[float] = metadata.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    unk = metadata.get("tokenizer.ggml.unknown_token_id")
    if unk is None:
        unk = next((i for i, kind in enumerate(types) if kind == TOKEN_TYPE_UNKNOWN), None)
    tokenizer = BackendTokenizer(
        models.Unigram(list(zip(tokens, map(float, scores), strict=True)), unk_id=unk, byte_fallback=False)
    )
    steps: list[normalizers.Normalizer] = []
    charsmap = metadata.get("tokenizer.ggml.precompiled_charsmap")
    if charsmap:
        steps.append(normalizers.Precompiled(bytes(charsmap)))
    if metadata.get("tokenizer.ggml.remove_extra_whitespaces", True):
        steps.append(normalizers.Replace(Regex(" {2,}"), " "))
    tokenizer.normalizer = normalizers.Sequence(steps)
    prepend = "always" if metadata.get("tokenizer.ggml.add_space_prefix", True) else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=prepend, split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=prepend, split=True)
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True) for t, kind in zip(tokens, types, strict=True) if kind == TOKEN_TYPE_CONTROL]
    )
    bos, eos = int(metadata.get("tokenizer.ggml.bos_token_id", 0)), int(metadata.get("tokenizer.ggml.eos_token_id", 2))
    sep = int(metadata.get("tokenizer.ggml.seperator_token_id", eos))
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{tokens[bos]} $A {tokens[eos]}",
        pair=f"{tokens[bos]} $A {tokens[eos]} {tokens[sep]} $B {tokens[eos]}",
        special_tokens=sorted({(tokens[bos], bos), (tokens[eos], eos), (tokens[sep], sep)}),
    )
    return tokenizer
