"""Tiny random encoder checkpoints (BERT, XLM-RoBERTa, their cross-encoders) in sentence-transformers'
layout, rebuilt bit for bit from a fixed seed with numpy and `tokenizers` (no torch).

BERT's tokenizer is a lower-casing WordPiece, XLM-RoBERTa's a SentencePiece Unigram with a
precompiled normalisation map, each as its real checkpoints have it.

`tools/reference/tiny_encoders.py` builds these, runs them in sentence-transformers and stores the
embeddings and scores as goldens; the engine tests rebuild the same directories and compare.
"""

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from engine.tasks.encode.encoder_model import LoadedEncoder
from text.encoder_inputs import EncoderTokenizer

SEED = 4321
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "an",
    "be",
    "this",
    "are",
    "from",
    "or",
    "have",
    "not",
    "but",
    "cat",
    "dog",
    "sat",
    "mat",
    "ran",
    "fast",
    "slow",
    "red",
    "blue",
    "green",
    "sun",
    "moon",
    "star",
    "sky",
    "sea",
    "river",
    "tree",
    "road",
    "house",
    "city",
    "what",
    "where",
    "who",
    "how",
    "why",
    "when",
    "paris",
    "france",
    "capital",
    "london",
    "rome",
    "book",
    "read",
    "write",
    "code",
    "run",
    "test",
)
SENTENCES = (
    "The cat sat on the mat.",
    "A dog ran fast in the city",
    "What is the capital of France?",
    "Paris is the capital of France.",
    "the sun and the moon and the stars in the sky",
    "Read a book, write some code, run the test.",
    "blue",
    "Where is the red house by the river? It is on the green road, by the tree.",
)
QUERY = "What is the capital of France?"

XLM_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0-3, and <mask> last, as XLM-RoBERTa numbers them
# Written by tools/reference/tiny_charsmap.py: capitals and full-width letters to lower case, "ﬁ" to
# "fi", the ideographic space to a space.
TINY_CHARSMAP = base64.b64decode(
    "AAQAAAAAAQBBaQAAQnkAAEN5AABEaQAARWkAAEaZAABHmQAASKkAAEmpAABKuQAAS7kAAEypAABNqQAATpkAAE+ZAABQ6QAAUekA"
    "AFL5AABT+QAAVOkAAFXpAABWmQAAV5kAAFipAABZqQAAWrkAAAIAAIAEAACABgAAgAgAAIAKAACADAAAgBEAAIATAACAFQAAgBcA"
    "AIAZAACAGwAAgB0AAIAfAACAIQAAgCMAAIAlAACAJwAAgCkAAIArAACALQAAgC8AAIAxAACAMwAAgDUAAIA3AACAgAwCAIAFAAAA"
    "AACAgQUAAA4AAIA7AAAAOgAAAD0AAAA8AAAAPwAAAD4AAACs5AMAQAAAAEMAAABCAAAARQAAAEQAAABHAAAARgAAAEkAAABIAAAA"
    "SwAAAEoAAABNAAAATAAAAE8AAABOAAAAvEQCAFAAAABTAAAAUgAAAFUAAABUAAAAVwAAAFYAAABZAAAAWAAAAFsAAABaAAAAXQAA"
    "AFwAAABfAAAAXgAAAKHtAQBgAAAAo/0BAKL9AQCl7QEApO0BAKcdAQCmHQEAqS0BAKgtAQCrPQEAqj0BAK0tAQCsLQEArx0BAK4d"
    "AQCxbQEAsG0BALN9AQCyfQEAtW0BALRtAQC3HQEAth0BALktAQC4LQEAewAAALo9AQB9AAAAfAAAAH8AAAB+AAAAgQAAAIAAAACD"
    "AAAAggAAAIUAAACEAAAAhwAAAIYAAACJAAAAiAAAAIsAAACKAAAAjQAAAIwAAACPAAAAjgAAAJEAAACQAAAAkwAAAJIAAACVAAAA"
    "lAAAAJcAAACWAAAAmQAAAJgAAACbAAAAmgAAAJ0AAACcAAAAnwAAAJ4AAAChAAAAoAAAAKMAAADjWAAApQAAAKQAAACnAAAApgAA"
    "AKkAAACoAAAAqwAAAKoAAACtAAAArAAAAK8AAADvDAEAsQAAALAAAACzAAAAsgAAALUAAAC0AAAAtwAAALYAAAC5AAAAuAAAALsA"
    "AAC6AAAAvQAAALwAAAC/AAAAvgAAAMEAAADAAAAAwwAAAMIAAADFAAAAxAAAAMcAAADGAAAAyQAAAMgAAADLAAAAygAAAM0AAADM"
    "AAAAzwAAAM4AAADRAAAA0AAAANMAAADSAAAA1QAAANQAAADXAAAA1gAAANkAAADYAAAA2wAAANoAAADdAAAA3AAAAN8AAADeAAAA"
    "4QAAAOAAAADjAAAA4gAAAOUAAADkAAAA5wAAAOYAAADpAAAA6AAAAOsAAADqAAAA7QAAAOwAAADvAAAA7gAAAPEAAADwAAAA8wAA"
    "APIAAAD1AAAA9AAAAPcAAAD2AAAA+QAAAPgAAAD7AAAA+gAAAP0AAAD8AAAA/wAAAP4AAAAgAGEAYgBjAGQAZQBmAGZpAGcAaABp"
    "AGoAawBsAG0AbgBvAHAAcQByAHMAdAB1AHYAdwB4AHkAegA="
)

_BERT: dict[str, Any] = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "vocab_size": len(SPECIALS) + 26 + len(WORDS) + 26,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "torch_dtype": "float32",
}

_XLM_ROBERTA: dict[str, Any] = {
    **_BERT,
    "vocab_size": len(XLM_SPECIALS) + 1 + 26 + len(WORDS) + 4,
    "architectures": ["XLMRobertaModel"],
    "model_type": "xlm-roberta",
    "type_vocab_size": 1,
    "pad_token_id": 1,
    "max_position_embeddings": 66,
    "layer_norm_eps": 1e-5,
}

# name → (config.json, pooling mode or None for a cross-encoder, normalized)
TINY_ENCODERS: dict[str, tuple[dict[str, Any], str | None, bool]] = {
    "bert_mean": (_BERT, "mean_tokens", True),
    "bert_cls": ({**_BERT, "hidden_act": "gelu_new"}, "cls_token", False),
    "xlm_roberta": (_XLM_ROBERTA, "mean_tokens", True),
    "bert_cross_encoder": ({**_BERT, "architectures": ["BertForSequenceClassification"], "num_labels": 1}, None, False),
    "xlm_roberta_cross_encoder": (
        {**_XLM_ROBERTA, "architectures": ["XLMRobertaForSequenceClassification"], "num_labels": 1},
        None,
        False,
    ),
}


def vocabulary() -> list[str]:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    return [*SPECIALS, *letters, *WORDS, *(f"##{letter}" for letter in letters)]


def tokenizer_json(decoder: bool = False) -> str:
    """A lower-casing WordPiece tokenizer over `vocabulary()` that wraps inputs in [CLS] … [SEP],
    or for a `decoder` ends them with [SEP] (as Qwen3-Embedding's tokenizer appends its end token)."""
    vocab = {token: i for i, token in enumerate(vocabulary())}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    single, pair = (
        ("$A [SEP]", "$A [SEP] $B:1 [SEP]:1") if decoder else ("[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1")
    )
    specials = [("[SEP]", sep)] if decoder else [("[CLS]", cls), ("[SEP]", sep)]
    tokenizer.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)
    return tokenizer.to_str()


def unigram_pieces() -> list[tuple[str, float]]:
    """XLM-RoBERTa's kind of vocabulary: word-initial pieces start with U+2581; scores are log
    probabilities (whole words likelier than letters, so a known word is one piece)."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    return [
        *((special, 0.0) for special in XLM_SPECIALS),
        *((f"\u2581{word}", -3.0 - 0.01 * i) for i, word in enumerate(WORDS)),
        ("\u2581", -4.0),
        *((letter, -6.0 - 0.01 * i) for i, letter in enumerate(letters)),
        *((mark, -5.0) for mark in ".,?"),
        ("<mask>", 0.0),
    ]


def unigram_tokenizer_json() -> str:
    """The tokenizer.json transformers writes for XLM-RoBERTa: the precompiled map, runs of spaces
    squeezed, U+2581 for spaces and before each input, <s> A </s> and <s> A </s></s> B </s>."""
    pieces = unigram_pieces()
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=XLM_SPECIALS.index("<unk>"), byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(TINY_CHARSMAP), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in [*XLM_SPECIALS, "<mask>"]])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return tokenizer.to_str()


def hf_tensor_shapes(config: dict[str, Any], cross_encoder: bool) -> dict[str, tuple[int, ...]]:
    D, F, V = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    prefix = ("roberta." if config["model_type"] == "xlm-roberta" else "bert.") if cross_encoder else ""
    e = f"{prefix}embeddings"
    shapes = {
        f"{e}.word_embeddings.weight": (V, D),
        f"{e}.position_embeddings.weight": (config["max_position_embeddings"], D),
        f"{e}.token_type_embeddings.weight": (config["type_vocab_size"], D),
        f"{e}.LayerNorm.weight": (D,),
        f"{e}.LayerNorm.bias": (D,),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"{prefix}encoder.layer.{i}"
        for name, shape in (
            ("attention.self.query", (D, D)),
            ("attention.self.key", (D, D)),
            ("attention.self.value", (D, D)),
            ("attention.output.dense", (D, D)),
            ("intermediate.dense", (F, D)),
            ("output.dense", (D, F)),
        ):
            shapes[f"{p}.{name}.weight"] = shape
            shapes[f"{p}.{name}.bias"] = (shape[0],)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}.{name}.weight"] = (D,)
            shapes[f"{p}.{name}.bias"] = (D,)
    if cross_encoder and prefix == "bert.":
        shapes |= {
            "bert.pooler.dense.weight": (D, D),
            "bert.pooler.dense.bias": (D,),
            "classifier.weight": (1, D),
            "classifier.bias": (1,),
        }
    elif cross_encoder:
        shapes |= {
            "classifier.dense.weight": (D, D),
            "classifier.dense.bias": (D,),
            "classifier.out_proj.weight": (1, D),
            "classifier.out_proj.bias": (1,),
        }
    return shapes


def _random_tensor(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if "LayerNorm.weight" in name:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if name.endswith(".bias"):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if "embeddings" in name:
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)
    return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


def build_tiny_encoder(name: str, directory: Path) -> Path:
    """Writes TINY_ENCODERS[name] into `directory`: config, weights, tokenizer and the
    sentence-transformers files (modules, pooling, longest input)."""
    config, pooling, normalize = TINY_ENCODERS[name]
    cross_encoder = pooling is None
    rng = np.random.default_rng(SEED)
    shapes = hf_tensor_shapes(config, cross_encoder)
    tensors = {n: _random_tensor(rng, n, shape) for n, shape in sorted(shapes.items())}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    bert = config["model_type"] == "bert"
    (directory / "tokenizer.json").write_text(tokenizer_json() if bert else unigram_tokenizer_json())
    specials = (
        {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]"}
        if bert
        else {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "cls_token": "<s>",
            "sep_token": "</s>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "mask_token": "<mask>",
        }
    )
    tokenizer_config = {
        # BERT's own class gives a pair's second segment token type 1, as real cross-encoders do.
        "tokenizer_class": "BertTokenizerFast" if bert else "PreTrainedTokenizerFast",
        **specials,
        "model_max_length": 48,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    if not cross_encoder:
        write_sentence_transformers_files(directory, config["hidden_size"], pooling, normalize)
    return directory


def write_sentence_transformers_files(directory: Path, dimensions: int, pooling: str, normalize: bool) -> None:
    """modules.json (Transformer, Pooling, optionally Normalize), the pooling config and the longest input."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (directory / "2_Normalize").mkdir(exist_ok=True)
    (directory / "modules.json").write_text(json.dumps(modules, indent=2))
    (directory / "1_Pooling").mkdir(exist_ok=True)
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    pooling_config = {"word_embedding_dimension": dimensions} | {
        f"pooling_mode_{mode}": mode == pooling for mode in modes
    }
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config, indent=2))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48, "do_lower_case": False}))


def encoder_tokenizer(encoder: LoadedEncoder) -> EncoderTokenizer:
    """How requests' texts reach `encoder` (the text side's job, text/encoder_inputs.py)."""
    return EncoderTokenizer(encoder.tokenizer, encoder.token_types)
