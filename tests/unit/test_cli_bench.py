"""The core bench waits for its subscribers while messages keep arriving, however slowly,
and stops once none arrived for the idle time (core NATS is at most once)."""

from __future__ import annotations

import asyncio

from jetraft.cli.admin.bench import Tally, _wait_for_subscribers


async def _deliver(tally: Tally, done: asyncio.Future, count: int, gap: float) -> None:
    for _ in range(count):
        await asyncio.sleep(gap)
        tally.received += 1
    done.set_result(count)


def test_a_slow_but_steady_delivery_is_waited_for_to_the_end():
    """Ten messages 0.05 s apart (0.5 s in all) with an idle time of 0.2 s: none is lost."""
    async def scenario() -> int:
        tally, done = Tally(), asyncio.get_running_loop().create_future()
        feeder = asyncio.create_task(_deliver(tally, done, 10, 0.05))
        await _wait_for_subscribers([done], tally, 0.2, asyncio.Event())
        await feeder
        return tally.received
    assert asyncio.run(scenario()) == 10


def test_a_delivery_that_stops_ends_the_wait_with_what_came():
    async def scenario() -> tuple[int, bool]:
        tally, never = Tally(received=3), asyncio.get_running_loop().create_future()
        await _wait_for_subscribers([never], tally, 0.1, asyncio.Event())
        return tally.received, never.done()
    assert asyncio.run(scenario()) == (3, False)


def test_ctrl_c_ends_the_wait():
    async def scenario() -> bool:
        stop, never = asyncio.Event(), asyncio.get_running_loop().create_future()
        stop.set()
        await asyncio.wait_for(_wait_for_subscribers([never], Tally(), 3600, stop), 10)
        return never.done()
    assert asyncio.run(scenario()) is False
