"""What the host reads from a checkpoint's files without loading it: whether a path is a model
folder, a projector or an adapter, a GGUF's architecture and metadata, its vocabulary as a
tokenizer, and the sampling the checkpoint recommends. No device work and no JAX at import: the
models folder's commands (`pooled list`) and `text` import it."""

from engine.lora.peft_adapter import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from engine.model.checkpoint.gguf_header import GGUF_MAGIC, gguf_architecture, read_gguf_metadata
from engine.model.checkpoint.gguf_vocab import tokenizer_from_gguf
from engine.model.checkpoint.hf_folder import checkpoint_files
from engine.model.checkpoint.recommended_sampling import RecommendedSampling, recommended_sampling
from engine.model.families.qwen2_vl.projector_files import LANGUAGE_ARCHITECTURE, is_projector_file

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "GGUF_MAGIC",
    "LANGUAGE_ARCHITECTURE",
    "RecommendedSampling",
    "checkpoint_files",
    "gguf_architecture",
    "is_projector_file",
    "read_gguf_metadata",
    "recommended_sampling",
    "tokenizer_from_gguf",
]
