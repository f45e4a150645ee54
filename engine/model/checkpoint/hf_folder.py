"""A Hugging Face model folder's files, read without its tensors: which files make up the
checkpoint (config.json, the shard index, the weights) and its config.json."""

import json
from pathlib import Path

from engine.errors import CheckpointError

SINGLE_FILE = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"


def checkpoint_files(directory: Path) -> list[Path]:
    """The files whose contents define the model: config.json, the shard index and the weights."""
    config = directory / "config.json"
    if not config.exists():
        raise CheckpointError(f"{directory} has no config.json")
    index = directory / SHARD_INDEX
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise CheckpointError(f"{index} is not a valid shard index") from None
        weights = sorted({directory / shard for shard in weight_map.values()})
        for shard in weights:
            if not shard.exists():
                raise CheckpointError(f"shard {shard.name} listed in {SHARD_INDEX} is missing from {directory}")
        return [config, index, *weights]
    if (directory / SINGLE_FILE).exists():
        return [config, directory / SINGLE_FILE]
    raise CheckpointError(f"{directory} has neither {SINGLE_FILE} nor {SHARD_INDEX}")


def read_hf_config(directory: Path) -> dict:
    config_path = directory / "config.json"
    try:
        return dict(json.loads(config_path.read_text()))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{config_path} is not valid JSON ({e.msg} at line {e.lineno})") from None
