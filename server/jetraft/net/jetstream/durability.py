"""Group commit for trio: one fsync pass makes every RAFT group's writes durable.

Each group's driver writes its :class:`~jetraft.raft.types.Ready` into its
:class:`~jetraft.raft.storage.GroupLog` (buffered in the OS), then ``await
barrier.wait()`` before sending the Ready's messages (persistence before send, Raft
Figure 2; etcd rawnode.go). A single background task runs
:meth:`~jetraft.raft.storage.GroupCommit.sync` in a worker thread; every ``wait()`` that
began before a sync *started* is released when that sync ends, so one fsync per dirty file
covers all groups that wrote meanwhile, however many there are.

A failed pass fails only the waiters it covered: they get its exception (a
:class:`~jetraft.raft.storage.SyncFailed` names the owners whose files failed; every other
file of the pass was made durable, so a waiter whose writes are not among them may go on).
The next pass is independent: the GroupCommit itself keeps reporting a file whose fsync
failed until its owner forgets it, so nothing written to it is ever taken for durable.

The module also holds what the standalone and clustered paths share about storage
failures: the client's error (:func:`storage_api_error`), the probe a resume attempt starts
with (:func:`probe_directory`) and the retry period (:data:`STORAGE_RETRY_S`); and :class:`TimedGroupCommit`, the group commit whose
fsyncs the metrics time.
"""

from __future__ import annotations

import errno as errno_mod
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

import trio
from prometheus_client import Histogram

from jetraft.jetstream import errors as E
from jetraft.jetstream.errors import JSApiError
from jetraft.storage import fileio, GroupCommit


class Syncable(Protocol):
    def sync(self) -> int:
        """Make every write so far durable; returns the number of fsyncs done."""
        ...


class _Pass:
    """One sync pass: waited on by the ``wait()`` calls that need it."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None


class DurabilityBarrier:
    """Batches ``wait()`` calls into as few ``sync()`` calls as possible.

    ``syncs`` counts sync passes, ``failures`` the passes that raised, and ``fsyncs`` the
    fsyncs the successful ones reported (for the event log and benchmarks). Run
    :meth:`run` in the server's nursery.
    """

    def __init__(self, commit: Syncable) -> None:
        self._commit = commit
        self._started = 0          # number of sync passes started
        self._passes: dict[int, _Pass] = {}   # passes waited for and not started yet
        self._wake_runner = trio.lowlevel.ParkingLot()
        self.syncs = 0
        self.failures = 0
        self.fsyncs = 0

    async def wait(self) -> None:
        """Return once every write made before this call is durable.

        Raises the exception of the sync pass that covered this call's writes (a
        :class:`~jetraft.raft.storage.SyncFailed` for failed fsyncs); later calls are
        covered by later passes.
        """
        needed = self._started + 1  # a sync already running may have missed our writes
        p = self._passes.get(needed)
        if p is None:
            p = self._passes[needed] = _Pass()
            self._wake_runner.unpark_all()
        await p.done.wait()
        if p.error is not None:
            raise p.error

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The sync loop; returns only on cancellation."""
        task_status.started()
        while True:
            while self._started + 1 not in self._passes:
                await self._wake_runner.park()
            self._started += 1
            p = self._passes.pop(self._started)
            try:
                fsyncs = await trio.to_thread.run_sync(self._commit.sync)
            except Exception as exc:  # noqa: BLE001 - handed to the waiters of this pass
                p.error = exc
                self.failures += 1
            else:
                self.fsyncs += fsyncs
            self.syncs += 1
            p.done.set()


# --- storage failures: what clients get, and how a stopped store is probed ---------------

#: Seconds between attempts to resume a stream (or RAFT group) stopped by a storage failure.
STORAGE_RETRY_S = 1.0
#: Bytes a resume attempt writes and fsyncs in the stopped store's directory first (a full
#: disk must have room for at least this much before anything else is tried).
PROBE_BYTES = 1 << 20
#: Seconds a probe may take before the attempt counts as failed.
PROBE_TIMEOUT_S = 10.0
#: The probe file's name (in the store's directory; removed after each probe).
PROBE_FILE = ".jetraft-probe"


def storage_api_error(exc: BaseException | None) -> JSApiError:
    """The error a client gets for a write refused because of the storage failure ``exc``.

    ENOSPC and EDQUOT (no room): 10023 (503) "insufficient resources", what nats-server
    2.15.1 answers a publish to a file stream once its store is full (its max_file_store,
    75% of the disk by default, is reached; seen on a full tmpfs). Any other error: 10077
    (503) JSStreamStoreFailedF with the system error's text as Go writes it (``input/output
    error``), the error nats-server answers a store failure with (server/stream.go
    processJetStreamMsg). Paths stay in the event log."""
    name = fileio.errno_name(exc)
    if name in ("ENOSPC", "EDQUOT"):
        return E.insufficient_resources()
    code = getattr(errno_mod, name, None) if name else None
    if isinstance(code, int):
        text = os.strerror(code)
        text = text[:1].lower() + text[1:]
    else:
        text = "storage failure"
    return E.stream_store_failed(text)


def probe_directory(directory: str, size: int = PROBE_BYTES) -> None:
    """Write ``size`` bytes to a probe file in ``directory``, fdatasync it and remove it
    (through the :mod:`~jetraft.storage.fileio` seam). Raises OSError when the disk
    does not take such a write."""
    path = os.path.join(directory, PROBE_FILE)
    try:
        fd = fileio.open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            fileio.pwrite_all(fd, bytes(size), 0, path)
            fileio.fdatasync(fd, path)
        finally:
            os.close(fd)
    finally:
        try:
            fileio.unlink(path)
        except OSError:
            pass


#: Upper bounds, in seconds, of the fsync histogram's buckets: 50 us (a fast NVMe disk)
#: to 2.5 s (a disk in trouble).
FSYNC_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class TimedGroupCommit(GroupCommit):
    """A :class:`~jetraft.raft.storage.GroupCommit` that records how long its fsyncs take.

    ``fsync_seconds`` is a prometheus_client Histogram (in no registry; the server's
    :class:`JetraftCollector` reports it as ``jetraft_fsync_duration_seconds``). One
    observation, in seconds of ``time.perf_counter``, per :meth:`sync` pass that fsynced
    at least one file or directory (a failed pass included: its fsyncs took that long too)
    and per immediate :meth:`fsync_now`/:meth:`fsync_dir_now`. Safe from worker threads
    (the DurabilityBarrier runs ``sync`` in one)."""

    def __init__(self, *, track_owners: bool = False) -> None:
        super().__init__(track_owners=track_owners)
        self.fsync_seconds = Histogram(
            "jetraft_fsync_duration_seconds",
            "Seconds each durability pass that fsynced at least one file or directory took "
            "(group commit: every dirty file, then every dirty directory; or one immediate fsync)",
            registry=None, buckets=FSYNC_BUCKETS)

    def _timed(self, call: Callable[[], Any]) -> Any:
        before = self.fsyncs
        start = time.perf_counter()
        try:
            return call()
        finally:
            if self.fsyncs != before:
                self.fsync_seconds.observe(time.perf_counter() - start)

    def sync(self) -> int:
        return self._timed(super().sync)

    def fsync_now(self, fd: int, path: str = "") -> None:
        self._timed(lambda: super(TimedGroupCommit, self).fsync_now(fd, path))

    def fsync_dir_now(self, path: str) -> None:
        self._timed(lambda: super(TimedGroupCommit, self).fsync_dir_now(path))
