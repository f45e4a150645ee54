"""Encoder models: loading a BERT or XLM-RoBERTa checkpoint (a safetensors directory with its
sentence-transformers files, or its GGUF: engine/model/families/bert/gguf_encoder.py) and running
batches of inputs through bucketed, compiled shapes.

A checkpoint's sentence-transformers files say how it pools: `modules.json` lists its modules
(Transformer, Pooling, Normalize; others are refused by name), `1_Pooling/config.json` the
pooling mode (mean, CLS or last token) and `sentence_bert_config.json` the longest input
(`max_seq_length`). Without them an encoder pools the mean of its tokens, unnormalised, as
sentence-transformers does for a bare Hugging Face model. A one-label `*ForSequenceClassification`
checkpoint is a cross-encoder: it scores (query, document) pairs instead.

Threads: `EncoderRunner` is used by one thread at a time, the engine thread (its `compile` runs
on the loading thread before that starts).
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from tokenizers import Tokenizer as BackendTokenizer

from engine.api import EncoderInput
from engine.device.runner_api import Report
from engine.errors import CheckpointError
from engine.model.checkpoint.hf_folder import checkpoint_files, read_hf_config
from engine.model.checkpoint.safetensors_dir import SafetensorsTensors
from engine.model.families.bert.bert import EncoderConfig
from engine.model.families.bert.encoder import Encoder
from engine.model.families.bert.gguf_encoder import is_gguf_encoder, read_gguf_encoder
from engine.model.families.registry import ENCODERS, encoder_for_hf_config
from engine.model.layers.pooling import Pooling
from engine.stats import HeldArrays

EncoderKind = Literal["embedding", "rerank"]
# sentence-transformers module types a checkpoint may list, and what each is here.
KNOWN_MODULES = {
    "sentence_transformers.models.Transformer": "transformer",
    "sentence_transformers.models.Pooling": "pooling",
    "sentence_transformers.models.Normalize": "normalize",
}
BATCH_ROWS = (1, 8, 32, 64)  # compiled batch sizes; a batch pads its rows up to one of them
MIN_BUCKET_TOKENS = 16


@dataclass(frozen=True)
class LoadedEncoder:
    config: EncoderConfig
    params: Any  # jax.Array tree on the device
    tokenizer: BackendTokenizer  # the checkpoint's, no truncation, no padding (text/encoder_inputs.py uses it)
    pooling: Pooling
    normalize: bool
    max_tokens: int  # per input, special tokens included
    matryoshka: bool  # whether its embeddings may be truncated to fewer dimensions
    source: Path

    @property
    def kind(self) -> EncoderKind:
        return "rerank" if self.config.head == "classifier" else "embedding"

    @property
    def dimensions(self) -> int:
        return self.config.hidden_size

    @property
    def token_types(self) -> int:
        """How many segment types the model embeds."""
        return self.config.type_vocab_size


def is_encoder_checkpoint(path: Path) -> bool:
    """Whether `path` is a directory holding an encoder family's checkpoint, or an encoder's GGUF."""
    if path.suffix == ".gguf":
        return is_gguf_encoder(path)
    config = path / "config.json"
    if not (path.is_dir() and config.is_file()):
        return False
    try:
        return encoder_for_hf_config(json.loads(config.read_text())) is not None
    except (OSError, ValueError):
        return False


def load_encoder(path: str | Path) -> LoadedEncoder:
    """Loads an encoder checkpoint directory or encoder GGUF; raises CheckpointError with a one-line reason."""
    path = Path(path).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        gguf = read_gguf_encoder(path)
        return _loaded(path, gguf.hf_config, gguf.tensors, gguf.tokenizer, (gguf.pooling, gguf.normalize), None)
    if not path.is_dir():
        raise CheckpointError(f"{path} is neither a model directory nor an encoder's .gguf file")
    hf = read_hf_config(path)
    family = encoder_for_hf_config(hf)
    if family is not None and family.config(hf).head == "classifier":
        pooling: tuple[Pooling, bool] = ("cls", False)
    else:
        pooling = declared_pooling(path)
    tensors = SafetensorsTensors([f for f in checkpoint_files(path) if f.suffix == ".safetensors"])
    return _loaded(path, hf, tensors, read_tokenizer(path), pooling, declared_max_tokens(path))


def _loaded(
    path: Path,
    hf: dict[str, Any],
    tensors: Mapping[str, np.ndarray],
    tokenizer: BackendTokenizer,
    pooling: tuple[Pooling, bool],
    max_tokens: int | None,
) -> LoadedEncoder:
    family = encoder_for_hf_config(hf)
    if family is None:
        known = ", ".join(encoder.name for encoder in ENCODERS)
        raise CheckpointError(f"{path}: model_type {hf.get('model_type')!r} is not an encoder family ({known})")
    config = family.config(hf)
    params = jax.device_put(_as_float32(family.convert(tensors, config)))
    _check_shapes(params, config, *pooling)
    return LoadedEncoder(
        config=config,
        params=params,
        tokenizer=tokenizer,
        pooling=pooling[0],
        normalize=pooling[1],
        max_tokens=min(config.max_positions, max_tokens or config.max_positions),
        matryoshka=declares_matryoshka(hf),
        source=path,
    )


def _as_float32(tree: Any) -> Any:
    return jax.tree.map(lambda array: np.asarray(array, np.float32), tree)


def _check_shapes(params: Any, config: EncoderConfig, pooling: Pooling, normalize: bool) -> None:
    """Every tensor the model needs, at the shape it needs (a damaged or mislabelled checkpoint is a
    CheckpointError here, not a failure inside the first batch)."""
    model = Encoder(config, pooling, normalize)
    tokens = jnp.zeros((1, 1), jnp.int32)
    expected = jax.eval_shape(model.init, jax.random.key(0), tokens, tokens, tokens.astype(bool))["params"]
    flat_expected = dict(jax.tree_util.tree_flatten_with_path(expected)[0])
    flat_params = dict(jax.tree_util.tree_flatten_with_path(params)[0])
    for key, shape in flat_expected.items():
        name = jax.tree_util.keystr(key)
        if key not in flat_params:
            raise CheckpointError(f"encoder checkpoint lacks {name}")
        if flat_params[key].shape != shape.shape:
            raise CheckpointError(f"encoder tensor {name} has shape {flat_params[key].shape}, expected {shape.shape}")


def _modules(path: Path) -> list[dict[str, Any]]:
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        return []
    modules = json.loads(modules_file.read_text())
    for module in modules:
        if module.get("type") not in KNOWN_MODULES:
            raise CheckpointError(
                f"{path}: sentence-transformers module {module.get('type')!r} is not supported "
                f"(known: {', '.join(KNOWN_MODULES)})"
            )
    return list(modules)


def declared_pooling(path: Path) -> tuple[Pooling, bool]:
    modules = _modules(path)
    normalize = any(KNOWN_MODULES[m["type"]] == "normalize" for m in modules)
    pooling_module = next((m for m in modules if KNOWN_MODULES[m["type"]] == "pooling"), None)
    if pooling_module is None:
        return "mean", normalize
    settings = json.loads((path / pooling_module.get("path", "1_Pooling") / "config.json").read_text())
    modes = [mode for mode in ("cls_token", "mean_tokens", "lasttoken") if settings.get(f"pooling_mode_{mode}")]
    others = [key for key, on in settings.items() if key.startswith("pooling_mode_") and on and key[13:] not in modes]
    if len(modes) != 1 or others:
        declared = sorted(key for key, on in settings.items() if on is True)
        raise CheckpointError(f"{path}: pooling {declared} is not supported (one of cls, mean, last token)")
    chosen: dict[str, Pooling] = {"cls_token": "cls", "mean_tokens": "mean", "lasttoken": "last"}
    return chosen[modes[0]], normalize


def declares_pooling(path: Path) -> bool:
    """Whether `path` holds sentence-transformers files that name a pooling module (a decoder
    checkpoint with them is an embedding model, as Qwen3-Embedding and gte-Qwen are)."""
    return path.is_dir() and any(KNOWN_MODULES[m["type"]] == "pooling" for m in _modules(path))


def declares_matryoshka(hf_config: dict[str, Any]) -> bool:
    """Whether a checkpoint's config says its embeddings may be cut to fewer dimensions."""
    return bool(hf_config.get("is_matryoshka") or hf_config.get("matryoshka_dimensions"))


def declared_max_tokens(path: Path) -> int | None:
    config = path / "sentence_bert_config.json"
    if config.is_file():
        length = json.loads(config.read_text()).get("max_seq_length")
        return int(length) if length else None
    return None


def read_tokenizer(path: Path) -> BackendTokenizer:
    file = path / "tokenizer.json"
    if not file.is_file():
        raise CheckpointError(f"{path} has no tokenizer.json")
    tokenizer = BackendTokenizer.from_file(str(file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def length_buckets(max_tokens: int) -> tuple[int, ...]:
    """Compiled input lengths: powers of two from MIN_BUCKET_TOKENS, then `max_tokens` itself."""
    buckets = [MIN_BUCKET_TOKENS]
    while buckets[-1] < max_tokens:
        buckets.append(buckets[-1] * 2)
    return tuple(min(b, max_tokens) for b in buckets)


# jitted: params, tokens, types, mask [rows, length] -> embeddings [rows, D] or logits [rows]
EncoderForward = jax.stages.Wrapped


class EncoderRunner:
    """Runs batches of inputs through one embedding or rerank model (an encoder family's, or a
    decoder's embedding pass), padded to a compiled (rows, tokens) bucket.

    A batch holds at most `batch_tokens` padded tokens; `compile` compiles every bucket within
    that budget ahead of serving, so no request compiles."""

    def __init__(self, forward: EncoderForward, params: Any, max_tokens: int, vocab_size: int, batch_tokens: int):
        self._forward = forward
        self._params = params
        self.max_tokens = max_tokens
        self.vocab_size = vocab_size
        self.lengths = length_buckets(max_tokens)
        self.batch_tokens = max(batch_tokens, self.lengths[-1])
        self._compiled: dict[tuple[int, int], jax.stages.Compiled] = {}  # by (rows, tokens)

    @classmethod
    def for_encoder(cls, encoder: LoadedEncoder, batch_tokens: int) -> "EncoderRunner":
        model = Encoder(encoder.config, encoder.pooling, encoder.normalize)
        forward = jax.jit(lambda params, tokens, types, mask: model.apply({"params": params}, tokens, types, mask))
        return cls(forward, encoder.params, encoder.max_tokens, encoder.config.vocab_size, batch_tokens)

    def held_arrays(self) -> HeldArrays:
        return HeldArrays((), tuple(jax.tree.leaves(self._params)))

    def buckets(self) -> list[tuple[int, int]]:
        return [(rows, length) for length in self.lengths for rows in BATCH_ROWS if rows * length <= self.batch_tokens]

    def rows_for(self, length: int) -> int:
        """The most inputs of up to `length` tokens one batch holds."""
        bucket = self._length_bucket(length)
        return max(rows for rows in BATCH_ROWS if rows * bucket <= self.batch_tokens)

    def compile(self, report: Report, what: str) -> None:
        """Compiles every bucket, reporting progress as `what`."""
        buckets = self.buckets()
        for done, (rows, length) in enumerate(buckets, 1):
            zeros = np.zeros((rows, length), np.int32)
            lowered = self._forward.lower(self._params, zeros, zeros, zeros.astype(bool))
            self._compiled[rows, length] = lowered.compile()
            report(what, done, len(buckets))

    def run(self, inputs: Sequence[EncoderInput]) -> np.ndarray:
        """Embeddings [len(inputs), D] or relevance logits [len(inputs)], float32. Each input holds
        1..max_tokens tokens; len(inputs) <= rows_for(its longest)."""
        length = self._length_bucket(max(len(i.token_ids) for i in inputs))
        rows = min(r for r in BATCH_ROWS if r >= len(inputs))
        tokens = np.zeros((rows, length), np.int32)
        types = np.zeros((rows, length), np.int32)
        mask = np.zeros((rows, length), bool)
        for row, item in enumerate(inputs):
            n = len(item.token_ids)
            tokens[row, :n] = item.token_ids
            types[row, :n] = item.type_ids
            mask[row, :n] = True
        mask[len(inputs) :, 0] = True  # padding rows attend to one token: no empty softmax
        # After `compile`, the bucket's own executable: a request never compiles.
        step = self._compiled.get((rows, length), self._forward)
        out = np.asarray(step(self._params, tokens, types, mask))
        return out[: len(inputs)]

    def _length_bucket(self, length: int) -> int:
        index = next((i for i, bucket in enumerate(self.lengths) if bucket >= length), None)
        if index is None:
            raise ValueError(f"input of {length} tokens is over the encoder's {self.lengths[-1]}")
        return self.lengths[index]
