"""What freeing a model gave back, as the program can tell: the bytes of the device arrays its
engine held that no longer exist once the engine is dropped.

A process's resident memory says little here: the allocator keeps freed pages, and a KV pool's
pages were only resident once touched. Weak references to the engine's arrays, taken before it
is dropped, see each array go without keeping it; one that something else still holds (a leak)
counts as still held.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

from engine.stats import HeldArrays
from handlers.context import ReleasedMemory


class ReleaseWatch:
    def __init__(self, held: HeldArrays) -> None:
        seen: set[int] = set()  # an array held twice (a tied head, shared weights) counts once
        self._parts: dict[str, list[tuple[weakref.ref[Any], int]]] = {}
        for part, arrays in (("kv_cache", held.kv_cache), ("weights", held.weights)):
            refs = []
            for array in arrays:
                if id(array) not in seen:
                    seen.add(id(array))
                    refs.append((weakref.ref(array), int(array.nbytes)))
            self._parts[part] = refs

    def released(self) -> ReleasedMemory:
        """Once the engine is dropped: bytes freed by part, and bytes still held."""
        gc.collect()  # arrays kept only by reference cycles go now, not at the next collection
        freed = {part: sum(size for ref, size in refs if ref() is None) for part, refs in self._parts.items()}
        held = sum(size for refs in self._parts.values() for ref, size in refs if ref() is not None)
        return ReleasedMemory(freed["kv_cache"], freed["weights"], held)
