"""The stored-responses store keeps its bounds: count, bytes, idle time, least recently used first."""

from __future__ import annotations

from handlers.response_store import ResponseStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_count_bound_evicts_least_recently_used() -> None:
    store = ResponseStore(max_responses=2, max_bytes=10**6, idle_seconds=60)
    store.put("a", {"id": "a"}, [])
    store.put("b", {"id": "b"}, [])
    assert store.get("a") is not None  # now b is the least recently used
    store.put("c", {"id": "c"}, [])
    assert store.get("b") is None
    assert store.get("a") is not None and store.get("c") is not None


def test_byte_bound_evicts_until_under() -> None:
    store = ResponseStore(max_responses=100, max_bytes=200, idle_seconds=60)
    for name in "abcd":
        store.put(name, {"id": name, "text": "x" * 60}, [])
    assert len(store) < 4
    assert store.get("d") is not None


def test_idle_entries_expire() -> None:
    clock = Clock()
    store = ResponseStore(max_responses=10, max_bytes=10**6, idle_seconds=60, clock=clock)
    store.put("a", {"id": "a"}, [])
    clock.now = 30
    assert store.get("a") is not None  # a use renews it
    clock.now = 89
    assert store.get("a") is not None
    clock.now = 150
    assert store.get("a") is None and len(store) == 0


def test_delete() -> None:
    store = ResponseStore(max_responses=10, max_bytes=10**6, idle_seconds=60)
    store.put("a", {"id": "a"}, [])
    assert store.delete("a") and not store.delete("a")
