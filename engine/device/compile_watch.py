"""Counts XLA compiles that happen on one thread (the engine thread, after start-up).

jax reports every backend compile through `jax.monitoring`, on the thread that triggered it. The
start-up compiles run on the thread calling `Engine.build`, and the deferred shapes' compiles on
the engine thread inside `planned()`; any other compile on the engine thread means a request met
a shape no bucket covered.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import jax.monitoring

_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileWatch:
    def __init__(self, thread: threading.Thread) -> None:
        self._thread = thread
        self.count = 0
        self._planned = False
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    @contextmanager
    def planned(self) -> Iterator[None]:
        """Compiles on the watched thread meanwhile are of planned shapes: not counted."""
        self._planned = True
        try:
            yield
        finally:
            self._planned = False

    def _on_event(self, event: str, duration_secs: float, **_: object) -> None:
        if event == _BACKEND_COMPILE_EVENT and threading.current_thread() is self._thread and not self._planned:
            self.count += 1

    def close(self) -> None:
        jax.monitoring.unregister_event_duration_listener(self._on_event)
