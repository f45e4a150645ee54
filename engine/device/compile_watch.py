"""Counts XLA compiles that happen on one thread (the engine thread, after start-up).

jax reports every backend compile through `jax.monitoring`, on the thread that triggered it. The
start-up compiles run on the thread calling `Engine.build`; any compile on the engine thread
afterwards means a request met a shape no bucket covered.
"""

import threading

import jax.monitoring

_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileWatch:
    def __init__(self, thread: threading.Thread) -> None:
        self._thread = thread
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration_secs: float, **_: object) -> None:
        if event == _BACKEND_COMPILE_EVENT and threading.current_thread() is self._thread:
            self.count += 1

    def close(self) -> None:
        jax.monitoring.unregister_event_duration_listener(self._on_event)
