"""The HTTP server process: uvicorn with a draining shutdown.

Threads: uvicorn runs the event loop on the main thread; its signal handler
(also the main thread) only flips flags. On the first SIGTERM/SIGINT the model
host starts draining: model routes answer 503 while requests in flight finish,
`/health` says "draining", and the listener stays open. Uvicorn's own
once-per-0.1 s tick ends the drain when nothing is in flight or the grace
period is over, and the process exits 0 (1 if the model was dead: it failed to
load or its engine stopped). A second signal exits at once. The same tick unloads
the model after `--idle-unload` seconds without model requests (the host does
the work on a thread of its own).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from types import FrameType

import uvicorn

from handlers.context import Counters
from pooled.hosting.model_host import ModelHost

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        host: ModelHost,
        counters: Counters,
        grace_s: float,
        beside: uvicorn.Server | None = None,
    ) -> None:
        """`beside`: a server run on the same loop and stopped with this one (--metrics-bind)."""
        super().__init__(config)
        self.host = host
        self.counters = counters
        self.grace_s = grace_s
        self.beside = beside
        self.drain_started: float | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if self.beside is None:
            await super().serve(sockets)
            return
        beside = asyncio.create_task(self.beside.serve())
        try:
            await super().serve(sockets)
        finally:
            self.beside.should_exit = True
            await beside

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain_started is None:
            self.drain_started = time.monotonic()
            self.host.drain()
            log.info("draining: %d request(s) in flight, up to %.0f s", self.counters.in_flight, self.grace_s)
        else:
            self.should_exit = self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        idle_s = self.host.settings.idle_unload
        last = max(self.counters.last_active, self.host.serving_since)
        quiet = self.counters.in_flight == 0 and time.monotonic() - last > (idle_s or 0)
        if idle_s is not None and quiet and self.host.state == "serving":
            self.host.unload()
        if self.drain_started is not None and not self.should_exit:
            over = time.monotonic() - self.drain_started > self.grace_s
            if self.counters.in_flight == 0 or over:
                if over:
                    log.warning("drain grace over with %d request(s) in flight", self.counters.in_flight)
                self.should_exit = True
        return await super().on_tick(counter)
