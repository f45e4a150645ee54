"""Reading checkpoints from disk. `engine.checkpoint.loader.load_model` is the entry point."""

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.raw import RawCheckpoint

__all__ = ["CheckpointError", "RawCheckpoint"]
