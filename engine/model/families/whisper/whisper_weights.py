"""Whisper's weights, from either checkpoint layout, as the parameter tree of `encoder_decoder`.

Hugging Face names each projection (`model.encoder.layers.0.self_attn.q_proj`); CTranslate2 fuses
a self-attention's query, key and value (`self_attention/linear_0`) and a cross-attention's key and
value (`attention/linear_1`), with a zero bias for the key. Both store matrices [out, in] and
convolutions [out, in, width]; Flax takes [in, out] and [width, in, out].
"""

from collections.abc import Callable, Mapping

import numpy as np

from engine.errors import CheckpointError
from engine.model.families.family import ParamTree
from engine.model.families.whisper.whisper_config import WhisperConfig

Get = Callable[[str], np.ndarray]


def _getter(tensors: Mapping[str, np.ndarray], layout: str) -> Get:
    def get(name: str) -> np.ndarray:
        if name not in tensors:
            raise CheckpointError(f"{layout} Whisper checkpoint is missing tensor {name!r}")
        return np.asarray(tensors[name], dtype=np.float32)

    return get


def _dense(weight: np.ndarray, bias: np.ndarray | None = None) -> ParamTree:
    dense: ParamTree = {"kernel": np.ascontiguousarray(weight.T)}
    if bias is not None:
        dense["bias"] = bias
    return dense


def _conv(weight: np.ndarray, bias: np.ndarray) -> ParamTree:
    return {"kernel": np.ascontiguousarray(weight.transpose(2, 1, 0)), "bias": bias}


def _embedding(table: np.ndarray) -> ParamTree:
    """The token embedding [vocab, d_model] and its input-major copy, the tied output head."""
    return {"embed": {"embedding": table}, "output": np.ascontiguousarray(table.T)}


def _norm(scale: np.ndarray, bias: np.ndarray) -> ParamTree:
    return {"scale": scale, "bias": bias}


def _attention(q: ParamTree, k: ParamTree, v: ParamTree, o: ParamTree) -> ParamTree:
    return {"q": q, "k": {"kernel": k["kernel"]}, "v": v, "o": o}


def _tree(
    config: WhisperConfig, encoder: ParamTree, encoder_layer: Callable[[int], ParamTree], decoder: ParamTree
) -> ParamTree:
    layers = {f"layer_{i}": encoder_layer(i) for i in range(config.encoder_layers)}
    return {"encoder": {**encoder, **layers}, "decoder": decoder}


def hf_params(tensors: Mapping[str, np.ndarray], config: WhisperConfig) -> ParamTree:
    """The tree from `WhisperForConditionalGeneration`'s tensors."""
    get = _getter(tensors, "Hugging Face")

    def dense(name: str, bias: bool = True) -> ParamTree:
        return _dense(get(f"{name}.weight"), get(f"{name}.bias") if bias else None)

    def norm(name: str) -> ParamTree:
        return _norm(get(f"{name}.weight"), get(f"{name}.bias"))

    def attention(name: str) -> ParamTree:
        return _attention(
            dense(f"{name}.q_proj"), dense(f"{name}.k_proj", False), dense(f"{name}.v_proj"), dense(f"{name}.out_proj")
        )

    def mlp(name: str) -> ParamTree:
        return {"fc1": dense(f"{name}.fc1"), "fc2": dense(f"{name}.fc2")}

    def encoder_layer(i: int) -> ParamTree:
        p = f"model.encoder.layers.{i}"
        return {
            "attn": attention(f"{p}.self_attn"),
            "attn_norm": norm(f"{p}.self_attn_layer_norm"),
            "mlp": mlp(p),
            "mlp_norm": norm(f"{p}.final_layer_norm"),
        }

    encoder: ParamTree = {
        "conv1": _conv(get("model.encoder.conv1.weight"), get("model.encoder.conv1.bias")),
        "conv2": _conv(get("model.encoder.conv2.weight"), get("model.encoder.conv2.bias")),
        "positions": get("model.encoder.embed_positions.weight"),
        "final_norm": norm("model.encoder.layer_norm"),
    }
    decoder: ParamTree = {
        **_embedding(get("model.decoder.embed_tokens.weight")),
        "positions": get("model.decoder.embed_positions.weight"),
        "final_norm": norm("model.decoder.layer_norm"),
    }
    for i in range(config.decoder_layers):
        p = f"model.decoder.layers.{i}"
        decoder[f"attn_{i}"] = attention(f"{p}.self_attn")
        decoder[f"attn_norm_{i}"] = norm(f"{p}.self_attn_layer_norm")
        decoder[f"cross_{i}"] = attention(f"{p}.encoder_attn")
        decoder[f"cross_norm_{i}"] = norm(f"{p}.encoder_attn_layer_norm")
        decoder[f"mlp_{i}"] = mlp(p)
        decoder[f"mlp_norm_{i}"] = norm(f"{p}.final_layer_norm")
    return _tree(config, encoder, encoder_layer, decoder)


def ct2_params(tensors: Mapping[str, np.ndarray], config: WhisperConfig) -> ParamTree:
    """The tree from a CTranslate2 `WhisperSpec` model's variables (engine/.../model_bin.py)."""
    get = _getter(tensors, "CTranslate2")
    d = config.d_model

    def linear(name: str) -> tuple[np.ndarray, np.ndarray]:
        return get(f"{name}/weight"), get(f"{name}/bias")

    def norm(name: str) -> ParamTree:
        return _norm(get(f"{name}/gamma"), get(f"{name}/beta"))

    def fused(name: str, parts: int) -> list[ParamTree]:
        weight, bias = linear(name)
        if weight.shape[0] != parts * d:
            raise CheckpointError(f"CTranslate2 tensor {name}/weight has {weight.shape[0]} rows, not {parts} × {d}")
        return [_dense(weight[j * d : (j + 1) * d], bias[j * d : (j + 1) * d]) for j in range(parts)]

    def self_attention(name: str) -> ParamTree:
        q, k, v = fused(f"{name}/linear_0", 3)
        return _attention(q, k, v, _dense(*linear(f"{name}/linear_1")))

    def cross_attention(name: str) -> ParamTree:
        k, v = fused(f"{name}/linear_1", 2)
        return _attention(_dense(*linear(f"{name}/linear_0")), k, v, _dense(*linear(f"{name}/linear_2")))

    def mlp(name: str) -> ParamTree:
        return {"fc1": _dense(*linear(f"{name}/linear_0")), "fc2": _dense(*linear(f"{name}/linear_1"))}

    def encoder_layer(i: int) -> ParamTree:
        p = f"encoder/layer_{i}"
        return {
            "attn": self_attention(f"{p}/self_attention"),
            "attn_norm": norm(f"{p}/self_attention/layer_norm"),
            "mlp": mlp(f"{p}/ffn"),
            "mlp_norm": norm(f"{p}/ffn/layer_norm"),
        }

    encoder: ParamTree = {
        "conv1": _conv(*linear("encoder/conv1")),
        "conv2": _conv(*linear("encoder/conv2")),
        "positions": get("encoder/position_encodings/encodings"),
        "final_norm": norm("encoder/layer_norm"),
    }
    decoder: ParamTree = {
        **_embedding(get("decoder/embeddings/weight")),
        "positions": get("decoder/position_encodings/encodings"),
        "final_norm": norm("decoder/layer_norm"),
    }
    for i in range(config.decoder_layers):
        p = f"decoder/layer_{i}"
        decoder[f"attn_{i}"] = self_attention(f"{p}/self_attention")
        decoder[f"attn_norm_{i}"] = norm(f"{p}/self_attention/layer_norm")
        decoder[f"cross_{i}"] = cross_attention(f"{p}/attention")
        decoder[f"cross_norm_{i}"] = norm(f"{p}/attention/layer_norm")
        decoder[f"mlp_{i}"] = mlp(f"{p}/ffn")
        decoder[f"mlp_norm_{i}"] = norm(f"{p}/ffn/layer_norm")
    return _tree(config, encoder, encoder_layer, decoder)
