"""Group commit: one fsync per dirty file per batch, shared by every RAFT group of a server.

Writes go to the OS page cache as they happen (``os.pwrite``); the file is marked dirty
here. The driver calls :meth:`GroupCommit.sync` once per batch of ``Ready`` structs across
all groups, and only then sends messages ("persist before send", Raft Figure 2; etcd
rawnode.go ``Ready.MustSync``). Directories are fsynced too after a file was created,
renamed or deleted in them (a new file's name is not durable until its directory is).

A failed fsync is never retried: after an ``EIO`` the kernel may have dropped the dirty
pages, so a second fsync could report success for data that is gone (PostgreSQL
"fsyncgate", 2018). The failure is confined to the file it happened on: that file is
*poisoned* (:attr:`SyncFile.failed`) and every later ``sync()`` reports it again without
touching it, until its owner forgets it; every other file of the batch is still synced.
``sync()`` then raises :class:`SyncFailed`, which names each failed file with its
*owner* (the store or group log that wrote it), so that the caller stops acknowledging
for those owners only. An owner recovers by rolling each poisoned file back to
:attr:`SyncFile.durable` (its length at its last successful fsync: everything acknowledged
is below it) and reopening from disk (``GroupLog.rollback_to_durable``,
``FileStore.reopen_verified``).

Files are made durable with ``fdatasync``, directories with ``fsync``. fdatasync skips only
metadata that reading the data back does not need (timestamps); a file's size is flushed
(Linux fdatasync(2)), so an append is durable with its new length. etcd's WAL does the same
(pkg/fileutil Fdatasync); under several writers on one ext4 disk it measured about 230 µs
here against about 290 µs for fsync. Every operation goes through :mod:`.fileio` (the
fault-injection seam).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

from jetraft.storage import fileio


class StorageError(Exception):
    """A store cannot continue: an fsync or write failed, or a file has an unknown format
    or version. Not a corruption of records (that is the RAFT log's CorruptRangeError).
    Code that drives a RAFT group catches it beside :class:`~jetraft.raft.types.RaftError`.

    ``errno`` (int or None) and ``path`` (str or None) name the system error behind it and
    the file it happened on, when there is one (``fileio.errno_name`` gives "ENOSPC"...)."""

    def __init__(self, message: str = "", *, errno: int | None = None,
                 path: str | None = None) -> None:
        super().__init__(message)
        self.errno = errno
        self.path = path


def storage_error(what: str, path: str, exc: OSError) -> StorageError:
    """A StorageError for the OSError ``exc`` met while doing ``what`` on ``path``
    (chain it with ``raise ... from exc``)."""
    return StorageError(f"{path}: {what} failed: {exc.strerror or exc}", errno=exc.errno,
                        path=path)


@dataclass(frozen=True, slots=True)
class SyncFailure:
    """One file a sync pass could not make durable: its ``owner`` (the SyncFile's, or one
    of the owners registered for a directory), ``path`` and the OSError."""

    owner: Any
    path: str
    error: BaseException


class SyncFailed(StorageError):
    """A sync pass could not make every file durable. ``failures`` lists each one (every
    other file of the pass was made durable); ``owners()`` the owners concerned."""

    def __init__(self, failures: list[SyncFailure]) -> None:
        first = failures[0]
        code = getattr(first.error, "errno", None)
        super().__init__(f"fsync failed for {len(failures)} file(s), first {first.path}: "
                         f"{getattr(first.error, 'strerror', None) or first.error}",
                         errno=code, path=first.path)
        self.failures = failures

    def owners(self) -> set[int]:
        """``id()`` of every owner concerned (owners need not be hashable)."""
        return {id(f.owner) for f in self.failures if f.owner is not None}

    def concerns(self, owner: Any) -> bool:
        """Whether a failure belongs to ``owner`` (or to no known owner)."""
        return any(f.owner is None or f.owner is owner for f in self.failures)

    def failure_of(self, owner: Any) -> SyncFailure | None:
        """The first failure of ``owner``, or None."""
        return next((f for f in self.failures if f.owner is owner), None)


class SyncFile:
    """An open file whose writes the GroupCommit makes durable.

    ``fd`` is an OS file descriptor opened for writing; ``after_sync`` (optional) is called
    under the GroupCommit lock once the file was fsynced; ``owner`` is reported with a
    failure. ``durable``: the file's length in bytes when its last successful fsync began
    (its length when opened, before any); the owner lowers it with :meth:`truncated`.
    ``failed``: the OSError of a failed fsync (then the file is never fsynced again).
    """

    __slots__ = ("fd", "path", "after_sync", "owner", "durable", "failed")

    def __init__(self, fd: int, path: str, after_sync: Callable[[], None] | None = None,
                 owner: Any = None, size: int = 0):
        self.fd = fd
        self.path = path
        self.after_sync = after_sync
        self.owner = owner
        self.durable = size
        self.failed: BaseException | None = None

    def truncated(self, size: int) -> None:
        """The owner cut the file to ``size`` bytes: what was durable beyond is gone."""
        if size < self.durable:
            self.durable = size


class GroupCommit:
    """Batched durability for every GroupLog of one server.

    ``fsyncs`` counts every fsync done through this object (batched and immediate), for
    benchmarks and tests. With ``track_owners``, ``touched`` maps ``id(owner)`` to the owner
    of every file and directory marked dirty since the caller last cleared it (the caller
    clears it; None without tracking). Thread safety: all methods take one lock, held
    through a whole ``sync()``, so ``sync()`` may run in a worker thread and two syncs never
    overlap (one that finds the dirty set taken returns after the other's fsyncs); the
    driver still serialises writers against ``sync()`` so a batch is well defined.
    """

    def __init__(self, *, track_owners: bool = False) -> None:
        self.fsyncs = 0
        self.touched: dict[int, Any] | None = {} if track_owners else None
        self._lock = threading.Lock()
        self._files: dict[int, SyncFile] = {}     # id(SyncFile) -> SyncFile
        self._dirs: dict[str, dict[int, Any]] = {}  # path -> owners (id -> owner)

    def mark_dirty(self, f: SyncFile) -> None:
        """Remember that ``f`` has writes not yet durable."""
        with self._lock:
            self._files[id(f)] = f
            if f.owner is not None and self.touched is not None:
                self.touched[id(f.owner)] = f.owner

    def mark_dir_dirty(self, path: str, owner: Any = None) -> None:
        """Remember that directory ``path`` had an entry created, renamed or removed (by
        ``owner``, who is told if the directory's fsync fails)."""
        with self._lock:
            owners = self._dirs.setdefault(path, {})
            if owner is not None:
                owners[id(owner)] = owner
                if self.touched is not None:
                    self.touched[id(owner)] = owner

    def forget(self, f: SyncFile) -> None:
        """Drop ``f`` from the dirty set; call before closing its descriptor (its data is
        being deleted or was made durable otherwise)."""
        with self._lock:
            self._files.pop(id(f), None)

    def forget_owner(self, owner: Any) -> None:
        """Drop every file and directory registration of ``owner`` (it is closing)."""
        with self._lock:
            for key, f in list(self._files.items()):
                if f.owner is owner:
                    del self._files[key]
            for owners in self._dirs.values():
                owners.pop(id(owner), None)

    def fsync_now(self, fd: int, path: str = "") -> None:
        """Make one file's descriptor durable immediately (snapshots, truncation repair on
        open), with fdatasync. Raises StorageError (with errno and path) if it fails."""
        with self._lock:
            try:
                fileio.fdatasync(fd, path)
            except OSError as exc:
                raise storage_error("fsync", path or f"fd {fd}", exc) from exc
            self.fsyncs += 1

    def fsync_dir_now(self, path: str) -> None:
        """fsync a directory immediately (after an atomic rename or a discard). Raises
        StorageError if it fails."""
        with self._lock:
            self._dirs.pop(path, None)
            try:
                self._fsync_dir(path)
            except OSError as exc:
                raise storage_error("fsync", path, exc) from exc

    def sync(self) -> int:
        """fsync every dirty file, then every dirty directory, each once.

        Returns the number of fsyncs done. Raises :class:`SyncFailed` if an fsync failed
        now, or failed earlier for a file still registered (see the module docstring):
        every other file was made durable all the same.
        """
        with self._lock:
            files, self._files = self._files, {}
            dirs, self._dirs = self._dirs, {}
            before = self.fsyncs
            failures: list[SyncFailure] = []
            for key, f in files.items():
                if f.failed is not None:
                    self._files[key] = f         # reported until its owner forgets it
                    failures.append(SyncFailure(f.owner, f.path, StorageError(
                        f"{f.path}: an earlier fsync failed: {f.failed}",
                        errno=getattr(f.failed, "errno", None), path=f.path)))
                    continue
                try:
                    size = os.fstat(f.fd).st_size
                    fileio.fdatasync(f.fd, f.path)
                except OSError as exc:
                    f.failed = exc
                    self._files[key] = f
                    failures.append(SyncFailure(f.owner, f.path, exc))
                    continue
                self.fsyncs += 1
                f.durable = size
                if f.after_sync is not None:
                    f.after_sync()
            for d in sorted(dirs):
                try:
                    self._fsync_dir(d)
                except OSError as exc:
                    owners = list(dirs[d].values()) or [None]
                    failures.extend(SyncFailure(o, d, exc) for o in owners)
            if failures:
                raise SyncFailed(failures)
            return self.fsyncs - before

    def sync_owner(self, owner: Any) -> int:
        """:meth:`sync`, raising only a failure that concerns ``owner`` (a failure of
        another owner's file is that owner's to handle). Returns the fsyncs done."""
        before = self.fsyncs
        try:
            return self.sync()
        except SyncFailed as exc:
            mine = [f for f in exc.failures if f.owner is owner or f.owner is None]
            if mine:
                raise SyncFailed(mine) from exc
            return self.fsyncs - before

    def _fsync_dir(self, path: str) -> None:
        """fsync directory ``path``; OSError if it fails."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return                      # the directory itself was removed
        try:
            fileio.fsync_dir(fd, path)
            self.fsyncs += 1
        finally:
            os.close(fd)
