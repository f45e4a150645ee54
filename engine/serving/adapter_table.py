"""`AdapterTable`: the LoRA adapters an engine serves, by name, in the runner's slots, and the
jobs that put them in or take them out on the engine thread.

A load reserves a free slot at once (the adapter is `loading`: requests cannot name it yet) and
queues a job; the engine thread writes the slot between two steps and marks it `ready`. An unload
marks the adapter `unloading` (new requests naming it are refused) and queues a job that the
engine thread carries out once no request using the adapter is in flight: those finish first.
Each request naming an adapter holds it from `use` (at submit) to `release` (when it closes).

Pages of the prefix cache are keyed by the adapter as well as by the tokens: a request's page
hashes chain from its adapter's `root` (its weights' digest), so a prompt prefilled under one
adapter is never reused under another or under none.

Threads: handler threads call `reserve`, `begin_unload`, `use` and `listing`; the engine thread
calls `release`, `idle`, `loaded` and `unloaded`. Each takes the table's lock briefly; none waits
on the device.
"""

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from engine.api import AdapterRefused, RequestRefused, ServedAdapter
from engine.lora.peft_adapter import LoraAdapter


@dataclass(frozen=True)
class AdapterJob:
    """Write `adapter` into `slot` (None: clear it, once the adapter `name` is idle)."""

    name: str
    slot: int
    adapter: LoraAdapter | None
    done: Future[None] = field(default_factory=Future)


@dataclass(frozen=True)
class AdapterUse:
    slot: int
    root: bytes  # the prefix-cache hash chain's root for its requests


class AdapterTable:
    def __init__(self, slots: int, rank: int) -> None:
        self.slots, self.rank = slots, rank
        self._lock = threading.Lock()
        self._by_name: dict[str, ServedAdapter] = {}
        self._free = list(range(slots, 0, -1))

    # --- any thread -------------------------------------------------------------------------

    def reserve(self, name: str, adapter: LoraAdapter) -> AdapterJob:
        """A free slot for `adapter`, and the job that fills it."""
        if self.slots == 0:
            raise AdapterRefused("lora_disabled", "this engine has no LoRA adapter slots (max_loras is 0)")
        if adapter.rank > self.rank:
            raise AdapterRefused("lora_rank", f"the adapter's rank {adapter.rank} is above max_lora_rank {self.rank}")
        with self._lock:
            if name in self._by_name:
                raise AdapterRefused("lora_exists", f"an adapter named {name!r} is already loaded")
            if not self._free:
                raise AdapterRefused(
                    "lora_slots_full", f"all {self.slots} adapter slots are taken: unload one of {self._names()}"
                )
            slot = self._free.pop()
            self._by_name[name] = ServedAdapter(name, adapter, slot)
            return AdapterJob(name, slot, adapter)

    def begin_unload(self, name: str) -> AdapterJob:
        """Refuses new requests for `name`; the job clears its slot once its requests are done."""
        with self._lock:
            served = self._by_name.get(name)
            if served is None or served.state == "loading":
                raise AdapterRefused("lora_not_found", self._unknown(name))
            if served.state == "unloading":
                raise AdapterRefused("lora_unloading", f"the adapter {name!r} is already being unloaded")
            served.state = "unloading"
            return AdapterJob(name, served.slot, None)

    def use(self, name: str) -> AdapterUse:
        """The slot a request naming `name` runs in; RequestRefused naming the loaded adapters."""
        with self._lock:
            served = self._by_name.get(name)
            if served is None or served.state != "ready":
                raise RequestRefused("unknown_adapter", self._unknown(name))
            served.running += 1
            served.requests += 1
            return AdapterUse(served.slot, bytes.fromhex(served.adapter.sha256))

    def listing(self) -> list[ServedAdapter]:
        """Copies of the ready and unloading adapters, by name."""
        with self._lock:
            return [
                ServedAdapter(**vars(served))
                for _, served in sorted(self._by_name.items())
                if served.state != "loading"
            ]

    # --- the engine thread ------------------------------------------------------------------

    def release(self, slot: int) -> None:
        """A request using the adapter in `slot` closed."""
        with self._lock:
            for served in self._by_name.values():
                if served.slot == slot:
                    served.running -= 1

    def idle(self, name: str) -> bool:
        with self._lock:
            return self._by_name[name].running == 0

    def loaded(self, job: AdapterJob) -> None:
        with self._lock:
            served = self._by_name[job.name]
            served.state, served.loaded_at = "ready", time.time()

    def unloaded(self, job: AdapterJob) -> None:
        with self._lock:
            del self._by_name[job.name]
            self._free.append(job.slot)

    def _names(self) -> str:
        return ", ".join(sorted(self._by_name)) or "none"

    def _unknown(self, name: str) -> str:
        ready = sorted(n for n, served in self._by_name.items() if served.state == "ready")
        return f"no LoRA adapter named {name!r} is loaded (loaded: {', '.join(ready) or 'none'})"
