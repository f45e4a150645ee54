"""Where pooled keeps what it prepares on disk: converted weights, built kernels, compiled programs."""

import os
from pathlib import Path


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir` if given, else `$POOLED_CACHE_DIR`, else ~/.cache/pooled/prepared."""
    if cache_dir is not None:
        return Path(cache_dir)
    if env := os.environ.get("POOLED_CACHE_DIR"):
        return Path(env)
    return Path.home() / ".cache" / "pooled" / "prepared"
