"""Group commit for trio: one fsync pass makes every RAFT group's writes durable.

Each group's driver writes its :class:`~jetraft.raft.types.Ready` into its
:class:`~jetraft.raft.storage.GroupLog` (buffered in the OS), then ``await
barrier.wait()`` before sending the Ready's messages (persistence before send, Raft
Figure 2; etcd rawnode.go). A single background task runs
:meth:`~jetraft.raft.storage.GroupCommit.sync` in a worker thread; every ``wait()`` that
began before a sync *started* is released when that sync ends, so one fsync per dirty file
covers all groups that wrote meanwhile, however many there are.

A failed fsync is fatal (the kernel may have dropped the data): every pending and later
``wait()`` raises the :class:`~jetraft.raft.storage.StorageError`, and the server must stop
rather than acknowledge anything.
"""

from __future__ import annotations

from typing import Protocol

import trio


class Syncable(Protocol):
    def sync(self) -> int:
        """Make every write so far durable; returns the number of fsyncs done."""
        ...


class DurabilityBarrier:
    """Batches ``wait()`` calls into as few ``sync()`` calls as possible.

    ``syncs`` counts sync passes and ``fsyncs`` the fsyncs they reported (for the event
    log and benchmarks). Run :meth:`run` in the server's nursery.
    """

    def __init__(self, commit: Syncable) -> None:
        self._commit = commit
        self._started = 0          # number of sync passes started
        self._done = 0             # number of sync passes finished
        self._needed = 0           # the highest pass number any waiter needs
        self._failure: BaseException | None = None
        self._wake_runner = trio.lowlevel.ParkingLot()
        self._wake_waiters = trio.lowlevel.ParkingLot()
        self.syncs = 0
        self.fsyncs = 0

    async def wait(self) -> None:
        """Return once every write made before this call is durable.

        Raises the storage error of a failed fsync (then and forever after).
        """
        if self._failure is not None:
            raise self._failure
        needed = self._started + 1  # a sync already running may have missed our writes
        if needed > self._needed:
            self._needed = needed
            self._wake_runner.unpark_all()
        while self._done < needed:
            if self._failure is not None:
                raise self._failure
            await self._wake_waiters.park()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The sync loop; returns only on cancellation or after a fatal storage error."""
        task_status.started()
        while True:
            while self._needed <= self._done:
                await self._wake_runner.park()
            self._started += 1
            try:
                fsyncs = await trio.to_thread.run_sync(self._commit.sync)
            except Exception as exc:  # noqa: BLE001 - any failure is fatal for durability
                self._failure = exc
                self._wake_waiters.unpark_all()
                return
            self.syncs += 1
            self.fsyncs += fsyncs
            self._done = self._started
            self._wake_waiters.unpark_all()
