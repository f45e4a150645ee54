"""Stored Responses-API responses: in memory only, bounded by count, bytes and idle time.

A response is kept (when `store` is true) with its input items so that
`previous_response_id` can continue it and `GET /v1/responses/{id}` can return
it. The least recently used is dropped first when either bound is passed; each
is dropped once it has gone unused for the idle limit. The store is touched
only from the event loop, so it needs no lock.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    size: int
    last_used: float


class ResponseStore:
    def __init__(
        self,
        max_responses: int,
        max_bytes: int,
        idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_responses = max_responses
        self.max_bytes = max_bytes
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def put(self, response_id: str, response: dict[str, Any], input_items: list[dict[str, Any]]) -> None:
        self.delete(response_id)
        size = len(json.dumps(response)) + len(json.dumps(input_items))
        self._entries[response_id] = StoredResponse(response, input_items, size, self.clock())
        self._bytes += size
        self._evict()

    def get(self, response_id: str) -> StoredResponse | None:
        self._expire()
        entry = self._entries.get(response_id)
        if entry is not None:
            entry.last_used = self.clock()
            self._entries.move_to_end(response_id)
        return entry

    def delete(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self._bytes -= entry.size
        return True

    def _expire(self) -> None:
        deadline = self.clock() - self.idle_seconds
        while self._entries:
            oldest_id, oldest = next(iter(self._entries.items()))
            if oldest.last_used > deadline:
                return
            self.delete(oldest_id)

    def _evict(self) -> None:
        self._expire()
        while len(self._entries) > self.max_responses or (self._bytes > self.max_bytes and len(self._entries) > 1):
            self.delete(next(iter(self._entries)))
