"""MemoryStorage: the in-memory :class:`~jetraft.raft.types.Storage` for tests, the
simulator and benchmarks (the role of etcd storage.go MemoryStorage).

The read side is the Storage protocol the core uses; the write side (``append``,
``set_hard_state``, ``apply_snapshot``, ``create_snapshot``, ``compact``) is what a driver
calls while handling a :class:`~jetraft.raft.types.Ready`. The on-disk storage offers the
same write methods.

Layout: ``_ents[0]`` is a sentinel standing for the snapshot (its index and term); the
entries after it are the log, contiguous, so a term lookup is one list index (O(1)).
"""

from __future__ import annotations

from .types import (
    CompactedError,
    ConfigChange,
    ConfigChangeType,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    UnavailableError,
)


def apply_config_entry(
    peers: tuple[str, ...], entry: Entry, *, undo: bool = False
) -> tuple[str, ...]:
    """The voters after a CONFIG_CHANGE ``entry`` (thesis §4.1), or with ``undo`` the ones
    before it given the ones after (:func:`apply_membership` with the learners left out)."""
    return apply_membership(peers, (), entry, undo=undo)[0]


_ADD, _REMOVE = ConfigChangeType.ADD_PEER, ConfigChangeType.REMOVE_PEER
_ADD_L, _REMOVE_L = ConfigChangeType.ADD_LEARNER, ConfigChangeType.REMOVE_LEARNER
_PROMOTE = ConfigChangeType.PROMOTE_LEARNER
#: each change's inverse, for undoing a truncated one
_INVERSE = {_ADD: _REMOVE, _REMOVE: _ADD, _ADD_L: _REMOVE_L, _REMOVE_L: _ADD_L}


def _without(names: tuple[str, ...], name: str) -> tuple[str, ...]:
    return tuple(p for p in names if p != name)


def apply_membership(
    voters: tuple[str, ...], learners: tuple[str, ...], entry: Entry, *, undo: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(voters, learners)`` after a CONFIG_CHANGE ``entry`` (thesis §4.1; learners as
    etcd's, thesis §4.2.1), or with ``undo`` the ones before it given the ones after. A
    malformed or no-op change (adding a known member, removing an unknown one) leaves them
    as they are. PROMOTE_LEARNER of a name that is no learner adds it as a voter (so the
    voters come out right when the learners are not tracked); undone, a voter becomes a
    learner again."""
    try:
        change = ConfigChange.decode(entry.data)
    except ValueError:
        return voters, learners
    kind, peer = change.type, change.peer
    if kind == _PROMOTE:
        if undo:
            if peer in voters:
                return _without(voters, peer), learners + (peer,)
            return voters, learners
        if peer in voters:
            return voters, _without(learners, peer)
        return voters + (peer,), _without(learners, peer)
    if undo:
        kind = _INVERSE[kind]
    if kind == _ADD:
        return (voters if peer in voters else voters + (peer,)), _without(learners, peer)
    if kind == _REMOVE:
        return _without(voters, peer), learners
    if kind == _ADD_L:
        if peer in voters or peer in learners:
            return voters, learners
        return voters, learners + (peer,)
    return voters, _without(learners, peer)


class MemoryStorage:
    """A log, hard state and snapshot held in memory. Not thread-safe."""

    __slots__ = ("_hs", "_snap", "_ents")

    def __init__(self, peers: tuple[str, ...] = ()) -> None:
        self._hs = HardState()
        self._snap = Snapshot(0, 0, tuple(peers))
        self._ents: list[Entry] = [Entry(0, 0)]

    # -- read side (types.Storage) -------------------------------------------------------

    def initial_state(self) -> tuple[HardState, tuple[str, ...]]:
        """The hard state and the latest configuration's voters in the log: the snapshot's
        peers with every CONFIG_CHANGE entry after it applied in order."""
        return self._hs, self._membership()[0]

    def initial_learners(self) -> tuple[str, ...]:
        """The latest configuration's learners in the log (as :meth:`initial_state`)."""
        return self._membership()[1]

    def _membership(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        voters, learners = self._snap.peers, self._snap.learners
        for e in self._ents[1:]:
            # Entries at or below the snapshot are already in the snapshot's configuration
            # (a snapshot may be taken without compacting the log up to it).
            if e.type == EntryType.CONFIG_CHANGE and e.index > self._snap.index:
                voters, learners = apply_membership(voters, learners, e)
        return voters, learners

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries in [lo, hi); at least one when the range is not empty, at most
        ``max_bytes`` of data in total. CompactedError if lo <= snapshot index,
        UnavailableError if hi > last_index() + 1."""
        base = self._ents[0].index
        if lo <= base:
            raise CompactedError(f"index {lo} compacted (first index {base + 1})")
        if hi > base + len(self._ents):
            raise UnavailableError(f"index {hi - 1} past last index {self.last_index()}")
        out = self._ents[lo - base : hi - base]
        if max_bytes is not None:
            out = limit_size(out, max_bytes)
        return out

    def term(self, index: int) -> int:
        base = self._ents[0].index
        if index < base:
            raise CompactedError(f"index {index} compacted (first index {base + 1})")
        off = index - base
        if off >= len(self._ents):
            raise UnavailableError(f"index {index} past last index {self.last_index()}")
        return self._ents[off].term

    def first_index(self) -> int:
        return self._ents[0].index + 1

    def last_index(self) -> int:
        return self._ents[0].index + len(self._ents) - 1

    def snapshot(self) -> Snapshot:
        return self._snap

    def hard_state(self) -> HardState:
        return self._hs

    # -- write side (the driver, from Ready) ---------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Append ``entries`` (contiguous); an entry whose index is already present
        truncates the log from there first. Entries at or below the snapshot are skipped.
        Raises ValueError when the entries would leave a gap after the last index."""
        if not entries:
            return
        base = self._ents[0].index
        first = entries[0].index
        if entries[-1].index <= base:
            return
        if first <= base:
            entries = entries[base + 1 - first :]
            first = base + 1
        off = first - base
        ents = self._ents
        if off > len(ents):
            raise ValueError(f"missing log entries: last {self.last_index()}, appending {first}")
        if off < len(ents):
            del ents[off:]
        ents.extend(entries)

    def set_hard_state(self, hs: HardState) -> None:
        self._hs = hs

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Install ``snap``: the log up to snap.index is discarded, and all of it when the
        log does not hold snap.index with snap.term. An older snapshot is ignored."""
        if snap.index <= self._snap.index:
            return
        base = self._ents[0].index
        off = snap.index - base
        keep: list[Entry] = []
        if 0 < off < len(self._ents) and self._ents[off].term == snap.term:
            keep = self._ents[off + 1 :]
        self._ents = [Entry(snap.term, snap.index), *keep]
        self._snap = snap

    def create_snapshot(self, index: int, data: bytes, peers: tuple[str, ...],
                        learners: tuple[str, ...] = ()) -> Snapshot:
        """Record the application's snapshot taken at applied ``index`` (with ``peers`` and
        ``learners``, the configuration at that index). Raises ValueError for an index at or
        below the current snapshot and UnavailableError past the last index."""
        if index <= self._snap.index:
            raise ValueError(f"snapshot index {index} not after current {self._snap.index}")
        snap = Snapshot(index, self.term(index), tuple(peers), data, tuple(learners))
        self._snap = snap
        return snap

    def compact(self, index: int) -> None:
        """Drop the entries up to ``index`` (which must be <= the snapshot index; ValueError
        otherwise). Compacting to an already compacted index does nothing."""
        if index > self._snap.index:
            raise ValueError(f"compact index {index} is past the snapshot index {self._snap.index}")
        base = self._ents[0].index
        if index <= base:
            return
        off = index - base
        self._ents = [Entry(self._ents[off].term, index), *self._ents[off + 1 :]]


def limit_size(entries: list[Entry], max_bytes: int) -> list[Entry]:
    """The longest prefix of ``entries`` whose data totals at most ``max_bytes`` (always at
    least one entry), as etcd's limitSize."""
    total = 0
    for i, e in enumerate(entries):
        total += len(e.data)
        if total > max_bytes and i > 0:
            return entries[:i]
    return entries
