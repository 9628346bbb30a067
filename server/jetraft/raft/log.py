"""The jetraft node's view of its log: durable storage plus the unstable tail
(etcd log.go and log_unstable.go, in our own shape).

Entries the node has accepted but the driver has not yet persisted live in ``_unstable``
(contiguous, starting at ``_offset``); everything below ``_offset`` is read from
:class:`~jetraft.raft.types.Storage`. A snapshot received from the leader waits in
``_snapshot`` until the driver installs it. Term lookups for the unstable tail are one list
index (O(1)); storage lookups are the storage's (O(1) for MemoryStorage).

Hand-out bookkeeping for :class:`~jetraft.raft.types.Ready`: ``_handed`` is the last
unstable index already given to the driver to persist, ``_applying`` the last committed
index already given to apply. ``committed`` and ``applied`` are the commit index and the
applied index (Raft Figure 2 "volatile state").
"""

from __future__ import annotations

from .memory import limit_size
from .types import CompactedError, Entry, Snapshot, Storage, UnavailableError


class RaftLog:
    __slots__ = (
        "storage",
        "_unstable",
        "_offset",
        "_snapshot",
        "_snap_handed",
        "_handed",
        "_applying",
        "committed",
        "applied",
    )

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        last = storage.last_index()
        self._unstable: list[Entry] = []
        self._offset = last + 1
        self._snapshot: Snapshot | None = None
        self._snap_handed = False
        self._handed = last
        first = storage.first_index()
        self.committed = first - 1
        self.applied = first - 1
        self._applying = first - 1

    # -- indexes and terms ---------------------------------------------------------------

    def first_index(self) -> int:
        snap = self._snapshot
        if snap is not None:
            return snap.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        return self._offset + len(self._unstable) - 1

    def last_term(self) -> int:
        return self.term(self.last_index())

    def stable_index(self) -> int:
        """The last index the driver has persisted (a leader's own match, Raft §5.3)."""
        return self._offset - 1

    def term(self, index: int) -> int:
        """The term at ``index``. CompactedError below the first index - 1,
        UnavailableError past the last index."""
        off = self._offset
        if index >= off:
            j = index - off
            if j < len(self._unstable):
                return self._unstable[j].term
            raise UnavailableError(f"index {index} past last index {self.last_index()}")
        snap = self._snapshot
        if snap is not None:
            if index == snap.index:
                return snap.term
            if index < snap.index:
                raise CompactedError(f"index {index} compacted (snapshot {snap.index})")
        return self.storage.term(index)

    def match_term(self, index: int, term: int) -> bool:
        try:
            return self.term(index) == term
        except (CompactedError, UnavailableError):
            return False

    def is_up_to_date(self, index: int, term: int) -> bool:
        """Whether a log ending at (index, term) is at least as up to date as ours
        (Raft §5.4.1: compare last terms, then lengths)."""
        last = self.last_index()
        last_term = self.term(last)
        return term > last_term or (term == last_term and index >= last)

    def find_conflict(self, entries: tuple[Entry, ...] | list[Entry]) -> int:
        """The index of the first entry of ``entries`` that is new or differs in term from
        ours, or 0 when every one is already in the log (Raft §5.3 step 3)."""
        if not entries:
            return 0
        last = self.last_index()
        if entries[0].index > last:
            return entries[0].index
        for e in entries:
            if e.index > last or not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest index <= ``index`` whose term is <= ``term``, with that term (fast
        backtracking: every entry after it of a larger term cannot match a log whose entry
        at ``index`` has ``term``; etcd log.go findConflictByTerm). Returns (i, 0) when the
        walk reaches compacted entries."""
        while index > 0:
            try:
                t = self.term(index)
            except CompactedError:
                return index, 0
            except UnavailableError:
                index = self.last_index()
                continue
            if t <= term:
                return index, t
            index -= 1
        return 0, 0

    # -- reading entries -----------------------------------------------------------------

    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries in [lo, hi) (at least one when lo < hi), at most ``max_bytes`` of data.
        CompactedError when lo is below the first index."""
        if lo >= hi:
            return []
        if lo < self.first_index():
            raise CompactedError(f"index {lo} compacted")
        off = self._offset
        out: list[Entry] = []
        if lo < off:
            out = self.storage.entries(lo, min(hi, off), max_bytes)
            if hi <= off or out[-1].index < min(hi, off) - 1:
                return out
            if max_bytes is not None:
                max_bytes -= sum(len(e.data) for e in out)
                if max_bytes <= 0:
                    return out
        part = self._unstable[max(lo, off) - off : hi - off]
        if max_bytes is not None:
            part = limit_size(part, max_bytes) if not out else _fit(part, max_bytes)
        if out:
            out.extend(part)
            return out
        return part

    # -- writing -------------------------------------------------------------------------

    def append(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        """Append contiguous ``entries``; those at indexes already present replace the
        log from there (the caller checked they are above ``committed``)."""
        first = entries[0].index
        off = self._offset
        unstable = self._unstable
        n = off + len(unstable)
        if first == n:
            unstable.extend(entries)
        elif first <= off:
            self._offset = first
            self._unstable = list(entries)
        elif first < n:
            del unstable[first - off :]
            unstable.extend(entries)
        else:
            raise ValueError(f"gap in log: last {n - 1}, appending {first}")
        if self._handed >= first:
            self._handed = first - 1

    def append_one(self, entry: Entry) -> None:
        """Append one entry right after the last (a leader's proposal; no truncation)."""
        self._unstable.append(entry)

    def commit_to(self, index: int) -> bool:
        """Raise the commit index to ``index`` (never lowers it). Returns whether it moved."""
        if index > self.committed:
            self.committed = index
            return True
        return False

    def restore(self, snap: Snapshot) -> None:
        """Replace the whole log by ``snap`` (Raft §7 "discard the entire log"), pending
        until the driver installs it."""
        self._snapshot = snap
        self._snap_handed = False
        self._unstable = []
        self._offset = snap.index + 1
        self._handed = snap.index
        self.committed = snap.index
        self._applying = max(self._applying, snap.index)

    # -- Ready hand-out and acknowledgement ----------------------------------------------

    def has_unstable(self) -> bool:
        return self._handed < self._offset + len(self._unstable) - 1

    def take_unstable(self) -> list[Entry]:
        """The unstable entries not yet handed to the driver; marks them handed."""
        start = self._handed + 1 - self._offset
        out = self._unstable[start:]
        self._handed = self._offset + len(self._unstable) - 1
        return out

    def has_pending_snapshot(self) -> bool:
        return self._snapshot is not None and not self._snap_handed

    def take_snapshot(self) -> Snapshot | None:
        if self._snapshot is None or self._snap_handed:
            return None
        self._snap_handed = True
        return self._snapshot

    def has_next_committed(self) -> bool:
        return self._applying < self.committed

    def take_committed(self, max_bytes: int | None = None) -> list[Entry]:
        """Committed entries not yet handed out for application, in order: at least one
        if any, at most ``max_bytes`` of entry data in all (None: no limit). The rest follow
        in later calls (etcd raft ``MaxCommittedSizePerReady``)."""
        lo = self._applying + 1
        hi = self.committed + 1
        if lo >= hi:
            return []
        out = self.slice(lo, hi, max_bytes)
        self._applying = out[-1].index
        return out

    def stable_to(self, index: int, term: int) -> None:
        """The driver persisted the entries up to ``index`` (of ``term``): drop them from the
        unstable tail. Ignored if that entry was since replaced (a later term)."""
        off = self._offset
        j = index - off
        if j < 0 or j >= len(self._unstable) or self._unstable[j].term != term:
            return
        del self._unstable[: j + 1]
        self._offset = index + 1

    def stable_snap_to(self, index: int) -> None:
        snap = self._snapshot
        if snap is not None and snap.index == index:
            self._snapshot = None
            self._snap_handed = False

    def applied_to(self, index: int) -> None:
        if index > self.applied:
            self.applied = index
        if index > self._applying:
            self._applying = index


def _fit(part: list[Entry], max_bytes: int) -> list[Entry]:
    """Like limit_size, but may return nothing (the caller already has entries)."""
    total = 0
    for i, e in enumerate(part):
        total += len(e.data)
        if total > max_bytes:
            return part[:i]
    return part
