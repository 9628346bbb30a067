"""SimStorage: a node's log as the simulator sees it, with a durable and a volatile layer.

Reads (the :class:`jetraft.raft.types.Storage` protocol) see every write, synced or not,
as a real log file seen through the page cache would. ``sync()`` makes the pending writes
durable; ``crash()`` throws away every write since the last sync; ``crash(keep=k)`` is a
torn write: the pending append survives only as its first ``k`` entries, nothing after it.
"""

from __future__ import annotations

from jetraft.raft.types import (
    CompactedError,
    ConfigChange,
    ConfigChangeType,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    UnavailableError,
)


class _Layer:
    """One consistent copy of the log: hard state, snapshot, and the log entries, where
    ``ents[0]`` is a sentinel for the log's base (the last compacted index and its term;
    the base may lie below the snapshot index when compaction kept a tail, as in
    MemoryStorage)."""

    __slots__ = ("snap", "ents", "hs")

    def __init__(self, snap: Snapshot, ents: list[Entry], hs: HardState) -> None:
        self.snap = snap
        self.ents = ents
        self.hs = hs

    def copy(self) -> _Layer:
        return _Layer(self.snap, list(self.ents), self.hs)

    @property
    def base(self) -> int:
        return self.ents[0].index

    def last_index(self) -> int:
        return self.ents[0].index + len(self.ents) - 1

    def term_at(self, index: int) -> int | None:
        """The term at ``index``, or None when it is compacted or past the end."""
        off = index - self.ents[0].index
        if off < 0 or off >= len(self.ents):
            return None
        return self.ents[off].term

    def log(self) -> list[Entry]:
        return self.ents[1:]

    def append(self, entries: list[Entry]) -> None:
        base = self.ents[0].index
        if entries[-1].index <= base:
            return
        first = entries[0].index
        if first <= base:
            entries = entries[base + 1 - first :]
            first = base + 1
        off = first - base
        if off > len(self.ents):
            raise AssertionError(f"append leaves a gap: first new index {first}, last index {self.last_index()}")
        del self.ents[off:]
        self.ents.extend(entries)

    def apply_snapshot(self, snap: Snapshot) -> None:
        if snap.index <= self.snap.index:
            return
        off = snap.index - self.ents[0].index
        keep: list[Entry] = []
        if 0 < off < len(self.ents) and self.ents[off].term == snap.term:
            keep = self.ents[off + 1 :]
        self.ents = [Entry(snap.term, snap.index), *keep]
        self.snap = snap

    def compact(self, index: int) -> None:
        off = index - self.ents[0].index
        if off <= 0:
            return
        self.ents = [Entry(self.ents[off].term, index), *self.ents[off + 1 :]]


class SimStorage:
    """MemoryStorage-like storage with crash semantics. Implements the Storage protocol and
    MemoryStorage's write methods (append, set_hard_state, apply_snapshot, create_snapshot,
    compact)."""

    def __init__(self, peers: tuple[str, ...] | list[str] = ()) -> None:
        self.durable = _Layer(Snapshot(0, 0, tuple(peers)), [Entry(0, 0)], HardState())
        self.view = self.durable.copy()
        # Writes since the last sync, in order: ("snap", Snapshot) | ("ents", [Entry]) | ("hs", HardState)
        self.pending: list[tuple[str, object]] = []
        self.syncs = 0

    # -- Storage protocol (reads see synced and unsynced writes) -----------------------

    def initial_state(self) -> tuple[HardState, tuple[str, ...]]:
        return self.view.hs, self.peers_at(self.view.last_index())

    def initial_learners(self) -> tuple[str, ...]:
        return self.membership_at(self.view.last_index())[1]

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        view = self.view
        base = view.ents[0].index
        if lo <= base:
            raise CompactedError(f"index {lo} compacted (first index {base + 1})")
        if hi > base + len(view.ents):
            raise UnavailableError(f"index {hi - 1} past the last index {view.last_index()}")
        out = view.ents[lo - base : hi - base]
        if max_bytes is not None and len(out) > 1:
            total = 0
            for i, e in enumerate(out):
                total += len(e.data)
                if total > max_bytes and i > 0:
                    return out[:i]
        return out

    def term(self, index: int) -> int:
        view = self.view
        base = view.ents[0].index
        if index < base:
            raise CompactedError(f"index {index} compacted (first index {base + 1})")
        off = index - base
        if off >= len(view.ents):
            raise UnavailableError(f"index {index} past the last index {view.last_index()}")
        return view.ents[off].term

    def first_index(self) -> int:
        return self.view.ents[0].index + 1

    def last_index(self) -> int:
        return self.view.last_index()

    def snapshot(self) -> Snapshot:
        return self.view.snap

    def hard_state(self) -> HardState:
        return self.view.hs

    # -- writes (from Ready), volatile until sync() -------------------------------------

    def apply_snapshot(self, snap: Snapshot) -> None:
        self.view.apply_snapshot(snap)
        self.pending.append(("snap", snap))

    def append(self, entries: list[Entry]) -> None:
        if not entries:
            return
        entries = list(entries)
        self.view.append(entries)
        self.pending.append(("ents", entries))

    def set_hard_state(self, hs: HardState) -> None:
        self.view.hs = hs
        self.pending.append(("hs", hs))

    def sync(self) -> None:
        """fsync: every pending write becomes durable."""
        for kind, arg in self.pending:
            self._apply(self.durable, kind, arg)
        self.pending.clear()
        self.syncs += 1

    def crash(self, keep: int | None = None) -> None:
        """Lose every unsynced write; with ``keep``, the first unsynced append keeps only its
        first ``keep`` entries (a torn write) and nothing after it survives."""
        if keep is not None:
            for kind, arg in self.pending:
                if kind == "ents":
                    if keep > 0:
                        self._apply(self.durable, kind, arg[:keep])  # type: ignore[index]
                    break
                self._apply(self.durable, kind, arg)
        self.pending.clear()
        self.view = self.durable.copy()

    def unsynced_entries(self) -> int:
        """How many entries the first pending append holds (0 if none): the tear range."""
        for kind, arg in self.pending:
            if kind == "ents":
                return len(arg)  # type: ignore[arg-type]
        return 0

    @staticmethod
    def _apply(layer: _Layer, kind: str, arg: object) -> None:
        if kind == "snap":
            layer.apply_snapshot(arg)  # type: ignore[arg-type]
        elif kind == "ents":
            layer.append(arg)  # type: ignore[arg-type]
        else:
            layer.hs = arg  # type: ignore[assignment]

    # -- application side: snapshot and compaction, durable at once (they only cover
    #    entries already applied, hence already synced) -----------------------------------

    def create_snapshot(self, index: int, data: bytes, peers: tuple[str, ...] | None = None) -> Snapshot:
        view = self.view
        if index <= view.snap.index:
            raise ValueError(f"snapshot index {index} not after current {view.snap.index}")
        term = self.term(index)
        if self.durable.term_at(index) != term:
            raise AssertionError(f"snapshot at {index} of an entry that is not durable")
        voters, learners = self.membership_at(index)
        snap = Snapshot(index, term, tuple(peers) if peers is not None else voters, data, learners)
        self.view.snap = snap
        self.durable.snap = snap
        return snap

    def compact(self, index: int) -> None:
        """Drop entries up to ``index`` (at most the snapshot index)."""
        if index > self.view.snap.index:
            raise ValueError(f"compact index {index} is past the snapshot index {self.view.snap.index}")
        for layer in (self.view, self.durable):
            layer.compact(index)

    # -- helpers for the simulator ------------------------------------------------------

    def peers_at(self, index: int) -> tuple[str, ...]:
        """The voters in effect at ``index`` (see :meth:`membership_at`)."""
        return self.membership_at(index)[0]

    def membership_at(self, index: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(voters, learners)`` in effect at ``index``: the snapshot's, then every config
        change entry after the snapshot up to ``index`` (a change takes effect when appended),
        replayed here by hand rather than with the core's own function."""
        view = self.view
        voters, learners = list(view.snap.peers), list(view.snap.learners)
        for e in view.ents[1:]:
            if e.index > index:
                break
            if e.index <= view.snap.index or e.type != EntryType.CONFIG_CHANGE:
                continue
            cc = ConfigChange.decode(e.data)
            t, p = cc.type, cc.peer
            if t == ConfigChangeType.ADD_PEER and p not in voters:
                voters.append(p)
            elif t == ConfigChangeType.REMOVE_PEER and p in voters:
                voters.remove(p)
            elif t == ConfigChangeType.ADD_LEARNER and p not in voters and p not in learners:
                learners.append(p)
            elif t == ConfigChangeType.REMOVE_LEARNER and p in learners:
                learners.remove(p)
            elif t == ConfigChangeType.PROMOTE_LEARNER:
                if p in learners:
                    learners.remove(p)
                if p not in voters:
                    voters.append(p)
        return tuple(voters), tuple(learners)
