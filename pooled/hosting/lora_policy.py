"""The trust policy for LoRA adapters: what a path may name, and what an adapter may be, before
its weights reach the engine.

An adapter is a PEFT adapter directory or a llama.cpp LoRA GGUF file (engine/lora/adapter_formats.py).
One named at start-up (`--lora NAME=PATH`) is the operator's own choice: any readable path. One
named at run time (the admin route) must resolve — symlinks followed, `..` refused outright —
inside one of the `--lora-root` directories (a relative path is taken inside them); with none
set, run-time loading is refused. Every adapter's weights file (`adapter_model.safetensors`, or
the GGUF file itself) is at most `--lora-max-bytes` (checked before it is read), its rank at most
`--max-lora-rank`, and with an allow-list (`--lora-sha256 NAME=DIGEST`) an adapter must be listed
under its name with the digest of its weights file. Shapes and targets are checked against the
served model by the readers (engine/lora/peft_adapter.py, engine/lora/gguf_adapter.py).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engine.api import AdapterRefused
from engine.checkpoints import ADAPTER_WEIGHTS
from engine.errors import CheckpointError
from engine.front import NEEDED, LoraAdapter, ModelConfig, adapter_weights_file, read_lora_adapter


@dataclass(frozen=True)
class LoraPolicy:
    roots: tuple[Path, ...] = ()
    max_rank: int = 16
    max_bytes: int = 1 << 30
    digests: Mapping[str, str] = field(default_factory=dict)  # name → sha256 (hex); empty: no allow-list

    def read(self, name: str, path: str, config: ModelConfig, at_runtime: bool) -> LoraAdapter:
        """The adapter at `path`, checked; AdapterRefused naming the rule it breaks (its `code`)."""
        location = self._location(path, at_runtime)
        try:
            weights = adapter_weights_file(location)
        except CheckpointError as error:
            raise AdapterRefused("lora_not_found", str(error)) from error
        if not weights.is_file():
            raise AdapterRefused("lora_not_found", f"{path}: no {ADAPTER_WEIGHTS} ({NEEDED})")
        size = weights.stat().st_size
        if size > self.max_bytes:
            raise AdapterRefused(
                "lora_too_large", f"{path}: {size} bytes of weights, above --lora-max-bytes {self.max_bytes}"
            )
        try:
            adapter = read_lora_adapter(location, config)
        except CheckpointError as error:
            raise AdapterRefused("lora_mismatch", str(error)) from error
        if adapter.rank > self.max_rank:
            raise AdapterRefused("lora_rank", f"{path}: rank {adapter.rank} is above --max-lora-rank {self.max_rank}")
        if self.digests:
            expected = self.digests.get(name)
            if expected is None:
                raise AdapterRefused("lora_not_allowed", f"{name!r} is not in the --lora-sha256 allow-list")
            if adapter.sha256 != expected.lower():
                raise AdapterRefused(
                    "lora_digest", f"{path}: sha256 {adapter.sha256} is not the allowed {expected.lower()} for {name!r}"
                )
        return adapter

    def _location(self, path: str, at_runtime: bool) -> Path:
        given = Path(path).expanduser()
        if not at_runtime:
            return given
        if ".." in given.parts:
            raise AdapterRefused("lora_path", f"{path}: '..' is not allowed in an adapter path")
        if not self.roots:
            raise AdapterRefused("lora_path", "loading adapters at run time needs --lora-root (none is set)")
        # A relative path names an adapter inside the roots (the first that has it).
        candidates = [given] if given.is_absolute() else [root.expanduser() / given for root in self.roots]
        resolved = next((c.resolve() for c in candidates if c.exists()), candidates[0].resolve())
        for root in self.roots:
            if resolved.is_relative_to(root.expanduser().resolve()):
                return resolved
        roots = ", ".join(str(root) for root in self.roots)
        raise AdapterRefused("lora_path", f"{path} resolves to {resolved}, outside every --lora-root ({roots})")
