"""A checkpoint's trained context read from its files without loading it: a GGUF's
`<architecture>.context_length`, a directory's config.json `max_position_embeddings`.

For listings (`/v1/models`' switch targets, `pooled list`): each value is read once per version of
the file. The GGUF reader is imported on first use, so a caller that meets no GGUF (`pooled list`
over a folder of directories) does not pay for importing it.
"""

import functools
import json
from pathlib import Path

from engine.errors import CheckpointError


def trained_context(path: Path) -> int | None:
    """The trained context of the GGUF file or checkpoint directory at `path`; None when unknown."""
    try:
        return _context_on_disk(path, path.stat().st_mtime_ns)
    except OSError:
        return None


@functools.lru_cache(maxsize=256)
def _context_on_disk(path: Path, modified_ns: int) -> int | None:
    """The checkpoint's trained context, read once per version of the file (a GGUF's metadata is
    parsed whole, its vocabulary included)."""
    try:
        if path.suffix == ".gguf":
            from engine.checkpoints import read_gguf_metadata  # ~1 s of imports (numpy, gguf, tokenizers)

            metadata = read_gguf_metadata(path, prefix="general.architecture")
            length = read_gguf_metadata(path, prefix=f"{metadata.get('general.architecture')}.context_length")
            found = next(iter(length.values()), None)
        else:
            found = json.loads((path / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, CheckpointError):
        return None
    return found if isinstance(found, int) else None
