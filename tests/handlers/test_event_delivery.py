"""The two hand-overs of a streamed answer's events on the event loop: the engine thread's events
through a loop's mailbox (handlers/generation/engine_bridge.py), and a stream's events through
its pump with keep-alives (handlers/generation/sse.py)."""

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from engine.api import EngineEvent, Prefilled
from handlers.generation.engine_bridge import mailbox
from handlers.generation.sse import with_keepalive


async def _collect(stream: AsyncIterator[str]) -> list[str]:
    return [item async for item in stream]


def test_events_posted_from_another_thread_arrive_in_order_in_their_queues() -> None:
    async def run() -> tuple[list[EngineEvent], list[EngineEvent]]:
        loop = asyncio.get_running_loop()
        box = mailbox(loop)
        assert mailbox(loop) is box
        first: asyncio.Queue[EngineEvent] = asyncio.Queue()
        second: asyncio.Queue[EngineEvent] = asyncio.Queue()

        def engine_thread() -> None:
            for i in range(500):
                box.post(first if i % 2 == 0 else second, Prefilled(i, 500))

        thread = threading.Thread(target=engine_thread)
        thread.start()
        got = ([await first.get() for _ in range(250)], [await second.get() for _ in range(250)])
        thread.join()
        return got

    first, second = asyncio.run(run())
    assert [event.done for event in first if isinstance(event, Prefilled)] == list(range(0, 500, 2))
    assert [event.done for event in second if isinstance(event, Prefilled)] == list(range(1, 500, 2))


def test_events_queued_meanwhile_go_out_in_one_write() -> None:
    async def events() -> AsyncGenerator[str, None]:
        for text in ("a", "b", "c"):
            yield text

    assert asyncio.run(_collect(with_keepalive(events(), 10.0))) == ["abc"]


def test_a_silent_stream_gets_keepalives_and_then_its_events() -> None:
    async def events() -> AsyncGenerator[str, None]:
        await asyncio.sleep(0.25)
        yield "late"

    out = asyncio.run(_collect(with_keepalive(events(), 0.05, keepalive="ping")))
    assert out[-1] == "late" and out[:-1] and set(out[:-1]) == {"ping"}


def test_an_error_after_some_events_reaches_the_reader_after_them() -> None:
    async def events() -> AsyncGenerator[str, None]:
        yield "a"
        await asyncio.sleep(0)
        raise RuntimeError("engine gone")

    async def run() -> list[str]:
        seen: list[str] = []
        with pytest.raises(RuntimeError, match="engine gone"):
            async for item in with_keepalive(events(), 10.0):
                seen.append(item)
        return seen

    assert asyncio.run(run()) == ["a"]


def test_a_reader_that_leaves_closes_the_stream() -> None:
    closed = asyncio.Event()

    async def events() -> AsyncGenerator[str, None]:
        try:
            while True:
                yield "x"
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    async def run() -> bool:
        stream = with_keepalive(events(), 10.0)
        assert isinstance(stream, AsyncGenerator)
        await anext(stream)
        await stream.aclose()
        return closed.is_set()

    assert asyncio.run(run())
