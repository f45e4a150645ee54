"""Caps glibc's malloc arenas for the serving process.

Why: glibc gives each thread that meets a locked arena an arena of its own, up to 8 per core, and
keeps each one's freed memory (up to 64 MiB) for that arena's next allocations. XLA's worker
threads, its compiler threads and the engine thread each allocate a step's or a compile's
temporaries, so a server held 14 arenas, ~700 MiB of which were freed temporaries (the Qwen2-0.5B
Q4_K_M server of docs/BENCHMARKS.md, issue 52). Two arenas reuse the same freed memory for every
thread (peak RSS -158 MiB on that server's start, a 3k-token prompt and 4 streams).
"""

import ctypes
import os
import sys

MALLOC_ARENAS = 2  # glibc's MALLOC_ARENA_MAX for `pooled serve`, unless the environment sets it
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


def limit_malloc_arenas(count: int = MALLOC_ARENAS) -> bool:
    """Caps glibc's arenas at `count` for this process; must run before its threads allocate.
    Returns whether it did: not where MALLOC_ARENA_MAX is set (the user's choice) or off Linux's glibc."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    return mallopt is not None and mallopt(_M_ARENA_MAX, count) == 1
