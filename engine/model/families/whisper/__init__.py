"""Whisper (speech to text): a log-mel front end, an audio encoder and a text decoder.

- `whisper`: the family, `LoadedWhisper` and the loader of both checkpoint layouts.
- `whisper_config`: the model's shape; `whisper_vocabulary`: its special tokens and token bytes.
- `whisper_weights`: either layout's tensors → the Flax parameter tree.
- `model_bin`: CTranslate2's model.bin, read with numpy.
- `log_mel`: audio samples → log-mel frames.
- `encoder_decoder`: the Flax network and the jittable `encode`, `cross_kv`, `decode`.
"""

from engine.model.families.whisper.encoder_decoder import CrossKV, SelfKV, cross_kv, decode, encode, init_self_kv
from engine.model.families.whisper.log_mel import log_mel
from engine.model.families.whisper.whisper import LoadedWhisper, Whisper, is_whisper_checkpoint, load_whisper
from engine.model.families.whisper.whisper_config import WhisperConfig
from engine.model.families.whisper.whisper_vocabulary import WhisperVocabulary

__all__ = [
    "CrossKV",
    "LoadedWhisper",
    "SelfKV",
    "Whisper",
    "WhisperConfig",
    "WhisperVocabulary",
    "cross_kv",
    "decode",
    "encode",
    "init_self_kv",
    "is_whisper_checkpoint",
    "load_whisper",
    "log_mel",
]
