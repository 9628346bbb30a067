"""Helpers for the jetraft log storage tests: a crash simulator and a model of the log.

``CrashFS`` wraps ``os.fsync`` and ``os.fdatasync`` (through pytest's monkeypatch) and
remembers what each made durable: a file's bytes (by inode) and a directory's names. ``crash(dir)``
then puts the directory back to exactly that: names never made durable vanish, removed
names whose removal was not made durable come back, and every file holds the bytes of its
last fsync (what a power loss may leave, Jepsen's ``--lazyfs``).

``Faults`` makes chosen file operations fail through the ``fileio`` seam (ENOSPC, EIO, a
short write), as a full or failing disk does.
"""

from __future__ import annotations

import errno
import os
import stat

from jetraft.raft.memory import MemoryStorage, apply_config_entry
from jetraft.raft.storage import GroupLog
from jetraft.storage import GroupCommit
from jetraft.raft.types import Entry, EntryType, HardState


class CrashFS:
    def __init__(self, monkeypatch) -> None:
        self.content: dict[int, bytes] = {}
        self.listing: dict[str, dict[str, int]] = {}
        self.calls: list[str] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            real(fd)
            self._durable(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fsync)

    def _durable(self, fd: int) -> None:
        """Record what an fsync or fdatasync of ``fd`` made durable."""
        st = os.fstat(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        self.calls.append(path)
        if stat.S_ISDIR(st.st_mode):
            self.listing[path] = {e.name: e.inode() for e in os.scandir(path)}
        else:
            with open(f"/proc/self/fd/{fd}", "rb") as f:   # fd may be write-only
                self.content[st.st_ino] = f.read()

    def crash(self, directory) -> None:
        """Put ``directory`` back to its last durable state (close its logs first)."""
        directory = os.fspath(directory)
        listing = self.listing.get(directory, {})
        for name in os.listdir(directory):
            if name not in listing:
                os.unlink(os.path.join(directory, name))
        durable = {name: self.content.get(ino, b"") for name, ino in listing.items()}
        fresh = {}
        for name, data in durable.items():      # inode numbers are reused: look up first
            path = os.path.join(directory, name)
            with open(path, "wb") as f:
                f.write(data)
            fresh[name] = os.stat(path).st_ino
            self.content[fresh[name]] = data
        self.listing[directory] = fresh


def entries(first: int, n: int, term: int = 1, size: int = 16) -> list[Entry]:
    """``n`` entries from index ``first``, each with ``size`` bytes of data naming it."""
    return [Entry(term, i, data=f"{term}:{i}:".encode().ljust(size, b".")) for i in
            range(first, first + n)]


def open_log(path, sync: GroupCommit | None = None, **kw) -> GroupLog:
    return GroupLog(path, sync=sync or GroupCommit(), **kw)


def segments(path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def reopened_model(m: MemoryStorage) -> MemoryStorage:
    """What a GroupLog holding ``m``'s state shows after a reopen: first index back at
    snapshot index + 1, commit clamped into [snapshot index, last index]."""
    snap = m.snapshot()
    hs = m.hard_state()
    r = MemoryStorage(snap.peers)
    if snap.index:
        r.apply_snapshot(snap)
    if m.last_index() > snap.index:
        r.append(m.entries(snap.index + 1, m.last_index() + 1))
    r.set_hard_state(HardState(hs.term, hs.vote,
                               max(snap.index, min(hs.commit, r.last_index()))))
    return r


def clamped(hs: HardState, snap_index: int, last: int) -> HardState:
    return HardState(hs.term, hs.vote, max(snap_index, min(hs.commit, last)))


def assert_same(log: GroupLog, model: MemoryStorage) -> None:
    """The log shows exactly the model's state."""
    assert log.first_index() == model.first_index()
    assert log.last_index() == model.last_index()
    assert log.snapshot() == model.snapshot()
    lo, hi = model.first_index(), model.last_index() + 1
    assert log.entries(lo, hi) == model.entries(lo, hi)
    for i in range(lo - 1, hi):
        assert log.term(i) == model.term(i)
    hs, peers = log.initial_state()
    mhs, _ = model.initial_state()
    assert hs == clamped(mhs, model.snapshot().index, model.last_index())
    assert peers == peers_at(model, model.last_index())


def peers_at(model: MemoryStorage, index: int) -> tuple[str, ...]:
    """The configuration at ``index``: the snapshot's peers changed by the CONFIG_CHANGE
    entries after the snapshot (MemoryStorage also applies those between its first index
    and the snapshot, which the snapshot's peers already include)."""
    snap = model.snapshot()
    peers = snap.peers
    if index > snap.index:
        for e in model.entries(snap.index + 1, index + 1):
            if e.type == EntryType.CONFIG_CHANGE:
                peers = apply_config_entry(peers, e)
    return peers


def die(log: GroupLog) -> None:
    """The process dies: close the log's files without syncing anything
    (:meth:`GroupLog.abandon`; use a fresh GroupCommit afterwards, as the restarted process
    would)."""
    log.abandon()


class Faults:
    """A :mod:`jetraft.storage.fileio` fault: makes chosen operations fail on paths
    containing a substring, as a full or failing disk would. Install with
    ``fileio.inject(faults)``; ``calls`` counts every operation seen, per (op, path).

    ``fail(op, where, err=EIO, times=None)``: raise ``OSError(err)`` (``times`` calls, or
    every call); ``short(where, n)``: the next pwrite writes only ``n`` bytes.
    """

    def __init__(self) -> None:
        self.rules: list[list] = []
        self.calls: dict[tuple[str, str], int] = {}

    def fail(self, op: str, where: str, err: int = errno.EIO, times: int | None = None) -> Faults:
        self.rules.append([op, where, err, times])
        return self

    def short(self, where: str, n: int) -> Faults:
        self.rules.append(["pwrite", where, -n - 1, 1])
        return self

    def clear(self) -> None:
        self.rules.clear()

    def __call__(self, op: str, path: str, size: int):
        self.calls[(op, path)] = self.calls.get((op, path), 0) + 1
        for rule in self.rules:
            r_op, where, err, times = rule
            if r_op != op or where not in path or times == 0:
                continue
            if times is not None:
                rule[3] = times - 1
            if err < 0:
                return -err - 1
            raise OSError(err, os.strerror(err), path)
        return None

    def count(self, op: str, where: str = "") -> int:
        return sum(n for (o, p), n in self.calls.items() if o == op and where in p)
