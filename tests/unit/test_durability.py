"""The trio group-commit barrier: one sync pass for every group that wrote before it."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from jetraft.net.jetstream.durability import DurabilityBarrier
from jetraft.raft.storage import LogDirectory
from jetraft.storage import GroupCommit, StorageError
from jetraft.raft.types import Entry


class GatedCommit:
    """A fake GroupCommit whose sync() blocks until the test opens the gate."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = threading.Event()
        self.fail = False

    def sync(self) -> int:
        self.gate.wait(10)
        self.calls += 1
        if self.fail:
            raise StorageError("fsync failed: EIO")
        return 1


async def test_waiters_before_a_sync_share_it():
    commit = GatedCommit()
    commit.gate.set()
    barrier = DurabilityBarrier(commit)
    released = []
    async with trio.open_nursery() as nursery:
        await nursery.start(barrier.run)
        async with trio.open_nursery() as waiters:
            for i in range(20):
                waiters.start_soon(lambda i=i: _wait_and_record(barrier, released, i))
        nursery.cancel_scope.cancel()
    assert sorted(released) == list(range(20))
    assert commit.calls == 1 and barrier.syncs == 1


async def _wait_and_record(barrier, released, i):
    await barrier.wait()
    released.append(i)


async def test_a_write_during_a_sync_waits_for_the_next_one():
    commit = GatedCommit()
    barrier = DurabilityBarrier(commit)
    order = []
    async with trio.open_nursery() as nursery:
        await nursery.start(barrier.run)

        async def waiter(name):
            await barrier.wait()
            order.append((name, commit.calls))

        nursery.start_soon(waiter, "first")
        await trio.testing.wait_all_tasks_blocked()   # sync 1 is running, blocked on the gate
        nursery.start_soon(waiter, "second")          # wrote after sync 1 started
        await trio.testing.wait_all_tasks_blocked()
        commit.gate.set()
        with trio.fail_after(10):
            while len(order) < 2:
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    assert order == [("first", 1), ("second", 2)]


async def test_a_failed_fsync_fails_every_waiter_now_and_later():
    commit = GatedCommit()
    commit.fail = True
    commit.gate.set()
    barrier = DurabilityBarrier(commit)
    async with trio.open_nursery() as nursery:
        await nursery.start(barrier.run)
        with pytest.raises(StorageError):
            await barrier.wait()
        with pytest.raises(StorageError):
            await barrier.wait()
        nursery.cancel_scope.cancel()


async def test_many_groups_on_disk_one_sync_pass(tmp_path):
    commit = GroupCommit()
    logs = LogDirectory(tmp_path, commit)
    groups = [logs.open(f"S-R3F-{i}", peers=("a", "b", "c")) for i in range(8)]
    barrier = DurabilityBarrier(commit)
    async with trio.open_nursery() as nursery:
        await nursery.start(barrier.run)
        async with trio.open_nursery() as drivers:
            for log in groups:
                log.append([Entry(1, 1, data=b"x" * 128)])
                drivers.start_soon(barrier.wait)
        nursery.cancel_scope.cancel()
    assert barrier.syncs == 1
    assert 8 <= barrier.fsyncs <= commit.fsyncs
    for log in groups:
        log.close()
