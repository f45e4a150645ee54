"""Encoder families: BERT (all-MiniLM, bge, e5, gte) and XLM-RoBERTa, as embedding models or, with a
one-label sequence-classification head, as cross-encoders.

Both read Hugging Face's tensor names; they differ in the prefix a `*ForSequenceClassification`
checkpoint puts before the encoder's tensors, in the head (BERT: its pooler, then a linear
classifier; XLM-RoBERTa: a dense layer with tanh on the first token, then a projection) and in
positions (RoBERTa counts them from `pad_token_id + 1`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from engine.errors import CheckpointError
from engine.model.families.family import TEXT, Family, Input, ParamTree, Task, TensorSource

Head = Literal["embedding", "classifier"]
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


@dataclass(frozen=True)
class EncoderConfig:
    family: str  # EncoderFamily.name
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    activation: str  # a value of ACTIVATIONS
    max_positions: int  # tokens one input may hold (the position table less RoBERTa's offset)
    position_offset: int  # the position-table row of a sequence's first token
    type_vocab_size: int
    layer_norm_eps: float
    head: Head

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


class EncoderFamily(Family):
    """An encoder: an embedding model, or with a one-label classifier a cross-encoder."""

    gguf_architecture = "bert"  # llama.cpp's for both; the vocabulary tells them apart (gguf_encoder.py)
    serves: ClassVar[Mapping[Task, tuple[Input, ...]]] = {"embed": TEXT, "rerank": TEXT}
    model_types: ClassVar[tuple[str, ...]]  # HF config.json `model_type`s in this family's layout
    classifier_prefix: ClassVar[str]  # before the encoder's tensors in a *ForSequenceClassification checkpoint

    def config(self, hf: Mapping[str, Any]) -> EncoderConfig:
        architecture = (hf.get("architectures") or [self.hf_architectures[0]])[0]
        head: Head = "classifier" if architecture.endswith("ForSequenceClassification") else "embedding"
        if head == "classifier":
            labels = len(hf.get("id2label") or {}) or int(hf.get("num_labels", 1))
            if labels != 1:
                raise CheckpointError(f"{architecture} with {labels} labels: a cross-encoder for rerank has one")
        activation = hf.get("hidden_act", "gelu")
        if activation not in ACTIVATIONS:
            raise CheckpointError(f"hidden_act {activation!r} is not supported (known: {', '.join(ACTIVATIONS)})")
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise CheckpointError(f"position_embedding_type {hf['position_embedding_type']!r} is not supported")
        offset = self.position_offset(hf)
        hidden, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        if hidden % heads:
            raise CheckpointError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
        return EncoderConfig(
            family=self.name,
            vocab_size=int(hf["vocab_size"]),
            hidden_size=hidden,
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=heads,
            intermediate_size=int(hf["intermediate_size"]),
            activation=ACTIVATIONS[activation],
            max_positions=int(hf["max_position_embeddings"]) - offset,
            position_offset=offset,
            type_vocab_size=int(hf.get("type_vocab_size", 2)),
            layer_norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
            head=head,
        )

    def position_offset(self, hf: Mapping[str, Any]) -> int:
        return 0

    def convert(self, tensors: Mapping[str, np.ndarray], config: EncoderConfig) -> ParamTree:
        """HF tensors → the `Encoder` module's parameter tree (encoder.py)."""
        get = TensorSource(tensors)
        prefix = self._encoder_prefix(tensors, config)
        D, N, H = config.hidden_size, config.num_heads, config.head_dim

        def dense(name: str) -> ParamTree:
            return {"kernel": get(f"{name}.weight").T, "bias": get(f"{name}.bias")}

        def norm(name: str) -> ParamTree:
            return {"scale": get(f"{name}.weight"), "bias": get(f"{name}.bias")}

        def heads(name: str) -> ParamTree:
            kernel = get(f"{name}.weight", (N * H, D)).T.reshape(D, N, H)
            return {"kernel": kernel, "bias": get(f"{name}.bias", (N * H,)).reshape(N, H)}

        embeddings = f"{prefix}embeddings"
        params: ParamTree = {
            "words": get(f"{embeddings}.word_embeddings.weight", (config.vocab_size, D)),
            "positions": get(f"{embeddings}.position_embeddings.weight"),
            "types": get(f"{embeddings}.token_type_embeddings.weight", (config.type_vocab_size, D)),
            "embed_norm": norm(f"{embeddings}.LayerNorm"),
        }
        for i in range(config.num_layers):
            layer = f"{prefix}encoder.layer.{i}"
            output = get(f"{layer}.attention.output.dense.weight", (D, N * H))
            params[f"layer_{i}"] = {
                "q": heads(f"{layer}.attention.self.query"),
                "k": heads(f"{layer}.attention.self.key"),
                "v": heads(f"{layer}.attention.self.value"),
                "o": {"kernel": output.T.reshape(N, H, D), "bias": get(f"{layer}.attention.output.dense.bias")},
                "attn_norm": norm(f"{layer}.attention.output.LayerNorm"),
                "up": dense(f"{layer}.intermediate.dense"),
                "down": dense(f"{layer}.output.dense"),
                "mlp_norm": norm(f"{layer}.output.LayerNorm"),
            }
        if config.head == "classifier":
            params.update(self.convert_head(get, dense))
        return params

    def convert_head(self, get: TensorSource, dense: Any) -> ParamTree:
        """The cross-encoder's head: `pool` (dense, tanh, on the first token) and `score` (to one logit)."""
        raise NotImplementedError

    def _encoder_prefix(self, tensors: Mapping[str, np.ndarray], config: EncoderConfig) -> str:
        if config.head == "classifier":
            return self.classifier_prefix
        # sentence-transformers saves the bare model; a *Model checkpoint from transformers may keep
        # the prefix of the class it was trained in.
        return self.classifier_prefix if f"{self.classifier_prefix}embeddings.word_embeddings.weight" in tensors else ""


class Bert(EncoderFamily):
    name = "bert"
    hf_architectures = ("BertModel", "BertForSequenceClassification")
    model_types = ("bert",)
    classifier_prefix = "bert."

    def convert_head(self, get: TensorSource, dense: Any) -> ParamTree:
        return {"pool": dense("bert.pooler.dense"), "score": dense("classifier")}


class XlmRoberta(EncoderFamily):
    name = "xlm-roberta"
    hf_architectures = ("XLMRobertaModel", "XLMRobertaForSequenceClassification")
    model_types = ("xlm-roberta", "roberta")  # RoBERTa checkpoints share XLM-RoBERTa's layout
    classifier_prefix = "roberta."

    def position_offset(self, hf: Mapping[str, Any]) -> int:
        return int(hf.get("pad_token_id", 1)) + 1

    def convert_head(self, get: TensorSource, dense: Any) -> ParamTree:
        return {"pool": dense("classifier.dense"), "score": dense("classifier.out_proj")}
