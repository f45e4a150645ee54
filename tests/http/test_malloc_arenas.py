"""`pooled serve` caps glibc's malloc arenas (pooled/hosting/malloc_arenas.py): eight threads that
allocate at once share two arenas instead of taking one each, unless MALLOC_ARENA_MAX says otherwise."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Eight threads allocate together, then glibc's malloc_info counts the arenas ("heaps").
PROBE = """
import ctypes, re, sys, tempfile, threading
from pooled.hosting.malloc_arenas import limit_malloc_arenas
limited = limit_malloc_arenas() if sys.argv[1] == "limit" else False
libc = ctypes.CDLL(None)
libc.malloc.restype = libc.fopen.restype = ctypes.c_void_p
libc.free.argtypes = libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
together = threading.Barrier(8)
def allocate():
    together.wait()
    blocks = [libc.malloc(4096) for _ in range(2000)]
    together.wait()
    for block in blocks:
        libc.free(block)
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
path = tempfile.mktemp()
report = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, report)
libc.fclose(report)
print(limited, len(re.findall('<heap nr=', open(path).read())))
"""


def arenas(mode: str, tmp_path: Path, **env: str) -> tuple[str, int]:
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=environment, cwd=tmp_path
    ).stdout
    limited, count = out.split()
    return limited, int(count)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")
def test_threads_share_two_arenas(tmp_path: Path) -> None:
    assert arenas("limit", tmp_path) == ("True", 2)
    assert arenas("none", tmp_path)[1] > 2  # without the cap, glibc gives the threads arenas of their own


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")
def test_the_environments_setting_wins(tmp_path: Path) -> None:
    assert arenas("limit", tmp_path, MALLOC_ARENA_MAX="3") == ("False", 3)
