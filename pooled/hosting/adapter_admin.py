"""`EngineAdapters`: the served model's LoRA adapters, as the admin routes and `--lora` use them.
Every load goes through the trust policy (pooled/hosting/lora_policy.py), then into a slot of the engine
(engine/serving/adapter_table.py), which writes it between two steps.

Threads: `load` reads and checks the weights on a worker thread (reading and hashing a file must
not hold the event loop), then awaits the engine thread's job; `unload` awaits its job; both
shield the engine's future, so a client that goes away never cancels a job the engine thread
will finish. `listing` takes the adapter table's lock briefly. `load_at_start` runs on the load
thread, before the server serves.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

from engine.api import AdapterEngine, AdapterRefused, ServedAdapter
from engine.front import TARGETS, ModelConfig
from handlers.context import AdapterEntry
from pooled.hosting.lora_policy import LoraPolicy

_MODULE_NAMES = {projection: module for module, (_, projection) in TARGETS.items()}


class EngineAdapters:
    def __init__(self, engine: AdapterEngine, config: ModelConfig, policy: LoraPolicy) -> None:
        self._engine, self._config, self._policy = engine, config, policy

    @property
    def slots(self) -> int:
        return self._engine.adapter_slots

    def listing(self) -> list[AdapterEntry]:
        return [_entry(served) for served in self._engine.adapter_listing()]

    async def load(self, name: str, path: str) -> AdapterEntry:
        adapter = await asyncio.to_thread(self._policy.read, name, path, self._config, True)
        await _finished(self._engine.load_adapter(name, adapter))
        entry = next((entry for entry in self.listing() if entry.name == name), None)
        if entry is None:  # unloaded again before this answer
            raise AdapterRefused("lora_not_found", f"the adapter {name!r} was unloaded as it loaded")
        return entry

    async def unload(self, name: str) -> None:
        await _finished(self._engine.unload_adapter(name))

    def load_at_start(self, name: str, path: str) -> None:
        """An adapter the operator named (`--lora`): any readable path, the other rules as at run time."""
        self._engine.load_adapter(name, self._policy.read(name, path, self._config, at_runtime=False)).result()


async def _finished(job: Future[None]) -> None:
    await asyncio.shield(asyncio.wrap_future(job))


def _entry(served: ServedAdapter) -> AdapterEntry:
    adapter = served.adapter
    return AdapterEntry(
        name=served.name,
        path=str(adapter.path),
        rank=adapter.rank,
        alpha=adapter.alpha,
        targets=tuple(_MODULE_NAMES[target] for target in adapter.targets),
        size_bytes=adapter.size_bytes,
        sha256=adapter.sha256,
        loaded_at=int(served.loaded_at),
        requests=served.requests,
        running=served.running,
        state="unloading" if served.state == "unloading" else "ready",
    )
