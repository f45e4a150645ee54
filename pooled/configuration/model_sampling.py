"""The served checkpoint's own sampling recommendation as settings: its GGUF's `general.sampling.*`
keys or its generation_config.json (engine/checkpoints.py reads them), as values of the settings a
request's omitted sampling fields take (handlers/generation/sampling_params.py's
`DEFAULT_SETTINGS`). A value its setting does not take (a temperature of 5) is left out, with a
warning naming the file, so a model's odd recommendation never stops it from serving.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from engine.checkpoints import recommended_sampling
from handlers.generation.sampling_params import DEFAULT_SETTINGS
from pooled.configuration.setting_sources import CheckpointDefaults, expects, flag_name, from_data

log = logging.getLogger(__name__)


def checkpoint_defaults(path: Path) -> CheckpointDefaults | None:
    """What the GGUF file or safetensors folder at `path` recommends; None where it recommends
    nothing. CheckpointError where its files cannot be read."""
    recommended = recommended_sampling(path)
    if recommended is None:
        return None
    values: dict[str, Any] = {}
    for field, value in recommended.values.items():
        name = DEFAULT_SETTINGS[field]
        try:
            values[name] = from_data(name, value)
        except ValueError:
            log.warning(
                "%s recommends %s %s, which %s does not take (%s): not applied",
                recommended.file,
                field,
                value,
                flag_name(name),
                expects(name),
            )
    return CheckpointDefaults(recommended.source, str(recommended.file), values) if values else None
