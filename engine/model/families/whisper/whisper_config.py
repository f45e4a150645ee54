"""A Whisper model's shape, from Hugging Face's config.json or from a CTranslate2 model's tensors."""

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import CheckpointError

AlignmentHeads = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class WhisperConfig:
    n_mels: int  # 80, or 128 for large-v3 and its turbo
    d_model: int
    encoder_layers: int
    encoder_heads: int
    decoder_layers: int
    decoder_heads: int
    vocab_size: int
    n_audio_ctx: int  # encoder positions: 1500 (30 s of 10 ms frames, halved by the second convolution)
    n_text_ctx: int  # decoder positions: 448
    ffn_dim: int
    # The (decoder layer, head) pairs whose cross-attention follows the speech (word timestamps):
    # here because `decode` returns their weights, a shape it must know when compiled.
    alignment_heads: AlignmentHeads

    @staticmethod
    def from_hf(hf: Mapping[str, Any], alignment_heads: Sequence[Sequence[int]] | None) -> "WhisperConfig":
        """From config.json, with generation_config.json's `alignment_heads` where it has them."""
        try:
            encoder_ffn, decoder_ffn = int(hf["encoder_ffn_dim"]), int(hf["decoder_ffn_dim"])
            if encoder_ffn != decoder_ffn:
                raise CheckpointError(f"encoder_ffn_dim {encoder_ffn} differs from decoder_ffn_dim {decoder_ffn}")
            decoder_layers, decoder_heads = int(hf["decoder_layers"]), int(hf["decoder_attention_heads"])
            return WhisperConfig(
                n_mels=int(hf["num_mel_bins"]),
                d_model=int(hf["d_model"]),
                encoder_layers=int(hf["encoder_layers"]),
                encoder_heads=int(hf["encoder_attention_heads"]),
                decoder_layers=decoder_layers,
                decoder_heads=decoder_heads,
                vocab_size=int(hf["vocab_size"]),
                n_audio_ctx=int(hf.get("max_source_positions", 1500)),
                n_text_ctx=int(hf.get("max_target_positions", 448)),
                ffn_dim=encoder_ffn,
                alignment_heads=_alignment_heads(alignment_heads, decoder_layers, decoder_heads),
            )
        except KeyError as missing:
            raise CheckpointError(f"Whisper config.json lacks {missing}") from None

    @staticmethod
    def from_ct2(tensors: Mapping[str, np.ndarray], alignment_heads: Sequence[Sequence[int]] | None) -> "WhisperConfig":
        """From a CTranslate2 model's tensors (their shapes and its `num_heads` scalars), with its
        config.json's `alignment_heads`."""

        def layers(prefix: str) -> int:
            return sum(
                1
                for _ in itertools.takewhile(
                    lambda i: f"{prefix}/layer_{i}/ffn/linear_0/weight" in tensors, itertools.count()
                )
            )

        try:
            d_model, n_mels, _ = tensors["encoder/conv1/weight"].shape
            decoder_layers, decoder_heads = layers("decoder"), int(tensors["decoder/num_heads"])
            return WhisperConfig(
                n_mels=n_mels,
                d_model=d_model,
                encoder_layers=layers("encoder"),
                encoder_heads=int(tensors["encoder/num_heads"]),
                decoder_layers=decoder_layers,
                decoder_heads=decoder_heads,
                vocab_size=tensors["decoder/embeddings/weight"].shape[0],
                n_audio_ctx=tensors["encoder/position_encodings/encodings"].shape[0],
                n_text_ctx=tensors["decoder/position_encodings/encodings"].shape[0],
                ffn_dim=tensors["encoder/layer_0/ffn/linear_0/weight"].shape[0],
                alignment_heads=_alignment_heads(alignment_heads, decoder_layers, decoder_heads),
            )
        except KeyError as missing:
            raise CheckpointError(f"CTranslate2 Whisper model.bin lacks {missing}") from None


def _alignment_heads(given: Sequence[Sequence[int]] | None, layers: int, heads: int) -> AlignmentHeads:
    """The checkpoint's alignment heads, or as openai-whisper and CTranslate2 default them: every
    head of the decoder's second half."""
    if not given:
        return tuple(itertools.product(range(layers // 2, layers), range(heads)))
    pairs = tuple((int(layer), int(head)) for layer, head in given)
    for layer, head in pairs:
        if not (0 <= layer < layers and 0 <= head < heads):
            raise CheckpointError(f"alignment head ({layer}, {head}) is outside {layers} layers of {heads} heads")
    return pairs
