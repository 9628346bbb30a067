"""Storage failures of a JetStream cluster's RAFT groups on one server, and their retries.

A RAFT group whose log write or fsync failed, whose log could not be read, or whose
replica store failed while applying, is stopped on this server by the RaftHost (it
neither votes nor acknowledges; the others go on and elect a leader among themselves)
and reported here; so is a replica or the meta group that could not be opened. Every
STORAGE_RETRY_S a resume is tried: a probe write and fsync in the group's directory
(the RAFT directory for a group not opened), then
a log failure: the log rolled back to what is provably on disk and reopened (the
replica's state as it was); a replica's store failure: the replica rebuilt from its
log (a fresh store, every committed entry applied again); an open failure: opened
again. The group then catches up from the leader like any lagging follower.

The standalone server's frozen streams are :mod:`.service`'s; what both share (the
client's error, the probe, the retry period) is :mod:`.durability`'s. A part of
:class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (``net/jetstream/cluster.py``),
over the state its ``__init__`` sets up: :meth:`StorageFailures._group_failed` is its RAFT
host's ``on_group_failed``, :meth:`StorageFailures._retry_storage` one of its tasks.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio

from jetraft.jetstream.cluster import META_GROUP
from jetraft.net.jetstream.durability import (
    PROBE_TIMEOUT_S,
    STORAGE_RETRY_S,
    probe_directory,
    storage_api_error,
)
from jetraft.raft.types import Role
from jetraft.storage import StorageError
from jetraft.storage.fileio import errno_name

if TYPE_CHECKING:
    from jetraft.net.raft.host import RaftGroup

__all__ = ["StorageFailure", "StorageFailures"]


class StorageFailures:
    """The storage failures of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (see
    the module docstring)."""

    def _group_failed(self, group: RaftGroup, exc: BaseException, op: str,
                      entries: list) -> None:
        """RaftHost.on_group_failed: log it, schedule a resume, and refuse the publishes
        this server proposed as leader that its log never made durable (their proposers
        would otherwise wait for an answer that cannot come from here)."""
        key = next((k for k, g in self.groups.items() if g is group), None)
        self._storage_failed(group.name, key, exc, op)
        if key is None or not entries or group.node.role is not Role.LEADER:
            return
        err = storage_api_error(exc).to_json()
        self.execute(self.controller.refuse_unsynced(key, entries, err))

    def _storage_failed(self, group: str, key: tuple[str, str] | None, exc: BaseException,
                        op: str) -> None:
        failure = self.storage_failures.get(group)
        now = trio.current_time()
        if failure is not None:             # failed again while resuming: keep the first
            failure.last_error = exc
            failure.retry_at = now + STORAGE_RETRY_S
            return
        self.storage_failures[group] = StorageFailure(group, key, exc, op, now, now + STORAGE_RETRY_S)
        self.events.emit(
            "jetstream_storage_failed", account=key[0] if key else None,
            stream=key[1] if key else None, consumer=None, group=group, errno=errno_name(exc),
            path=getattr(exc, "path", None) or getattr(exc, "filename", None), op=op,
            error=str(exc) or type(exc).__name__)

    def _storage_resumed(self, failure: StorageFailure) -> None:
        if self.storage_failures.get(failure.group) is failure:
            del self.storage_failures[failure.group]
        key = failure.key
        self.events.emit("jetstream_storage_resumed", account=key[0] if key else None,
                         stream=key[1] if key else None, group=failure.group,
                         frozen_s=round(trio.current_time() - failure.since, 3),
                         attempts=failure.attempts, rolled_back=None)

    async def _retry_storage(self) -> None:
        while True:
            await trio.sleep(STORAGE_RETRY_S / 4)
            now = trio.current_time()
            for name, failure in list(self.storage_failures.items()):
                if failure.retry_at > now or self.storage_failures.get(name) is not failure:
                    continue
                if name == META_GROUP and self.meta_group is None:
                    continue                # the bootstrap loop opens it again
                await self._try_resume(failure)

    async def _try_resume(self, failure: StorageFailure) -> None:
        failure.attempts += 1
        failure.last_error = None
        hosted = self.host.groups.get(failure.group)
        directory = hosted.log.directory if hosted is not None else self.host.logs.root
        try:
            with trio.fail_after(PROBE_TIMEOUT_S):
                await trio.to_thread.run_sync(probe_directory, directory, abandon_on_cancel=True)
            resumed = await self._resume(failure)
            if failure.last_error is not None:
                raise failure.last_error
        except (StorageError, OSError, trio.TooSlowError) as exc:
            failure.retry_at = trio.current_time() + STORAGE_RETRY_S
            key = failure.key
            self.events.emit("jetstream_storage_retry_failed", account=key[0] if key else None,
                             stream=key[1] if key else None, group=failure.group,
                             errno=errno_name(exc), error=str(exc) or type(exc).__name__,
                             retry_in_s=STORAGE_RETRY_S)
            return
        if resumed:
            self._storage_resumed(failure)
        elif self.storage_failures.get(failure.group) is failure:
            del self.storage_failures[failure.group]

    async def _resume(self, failure: StorageFailure) -> bool:
        """One resume attempt (see above); False when there is nothing left to resume (the
        stream was deleted or moved away meanwhile). Storage errors propagate."""
        if failure.group == META_GROUP:
            await self.host.reopen_group_off_loop(META_GROUP)
            self.execute(self.controller.ensure_assigned(time.time_ns()))
            return True
        key = failure.key
        sa = self.meta.streams.get(key) if key is not None else None
        if sa is None or sa.group != failure.group or self.server.server_name not in sa.peers:
            return False
        group = self.groups.get(key)
        if group is not None and failure.op != "apply":
            await self.host.reopen_group_off_loop(failure.group)
            return True
        if group is not None:               # the replica's state is unknown: rebuild it
            self.groups.pop(key, None)
            self.replicas.pop(key, None)
            self.host.close_group(group.name)
        self.execute(self.controller.reopen_replica(key, time.time_ns()))
        return True


class StorageFailure:
    """A group stopped on this server by a storage failure: ``key`` its (account, stream)
    (None for the meta group), ``error`` the first failure and ``op`` what failed,
    ``since``/``retry_at`` trio clock seconds, ``attempts`` resumes tried, ``last_error``
    the failure of the attempt running (None when it has met none)."""

    __slots__ = ("group", "key", "error", "op", "since", "retry_at", "attempts", "last_error")

    def __init__(self, group: str, key: tuple[str, str] | None, error: BaseException, op: str,
                 since: float, retry_at: float) -> None:
        self.group, self.key, self.error, self.op = group, key, error, op
        self.since, self.retry_at = since, retry_at
        self.attempts = 0
        self.last_error: BaseException | None = None
