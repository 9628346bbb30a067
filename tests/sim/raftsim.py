"""A deterministic simulator for one jetraft RAFT group, with a safety checker.

:class:`Cluster` holds N nodes of one group (a :class:`jetraft.raft.node.RaftNode` each over
a :class:`raftsim_storage.SimStorage`) and the primitives every test drives them with: tick,
deliver a message, take a Ready and persist it (volatile), sync it (fsync: then, and only
then, send its messages and apply its committed entries, then ``advance``), crash (unsynced
writes lost, or a torn append), restart, propose, snapshot + compact. Scripted scenarios
call the primitives by hand, in the style of etcd-io/raft's interaction tests: messages
wait in ``cluster.mailbox`` until the script delivers or drops them.

:class:`RandomSim` (in ``raftsim_random``) schedules the same primitives as discrete events
in virtual time under a seeded ``random.Random``, with a network that delays, loses,
duplicates and reorders, and a nemesis.

:class:`Checker` is called after every primitive and raises :class:`InvariantViolation`
naming the invariant: election safety, leader append-only, log matching, leader
completeness, state machine safety, committed entries durable on a quorum.
Nothing here reads a clock or depends on hash randomisation or object identity.
"""

from __future__ import annotations

import collections
import hashlib
from dataclasses import dataclass, field
from typing import Callable, Iterable

from jetraft.raft.types import (
    ConfigChange,
    Entry,
    Message,
    MessageType,
    Ready,
    Role,
    Snapshot,
)
from jetraft.raft.types import Config as RaftConfig
from raftsim_storage import SimStorage

GROUP = "g"


def default_node_cls():
    from jetraft.raft.node import RaftNode

    return RaftNode


class InvariantViolation(AssertionError):
    """A safety (or liveness) property of RAFT does not hold. ``invariant`` names it."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


def chain_hash(prev: bytes, entry_term: int, data: bytes) -> bytes:
    return hashlib.blake2b(prev + entry_term.to_bytes(8, "big") + data, digest_size=12).digest()


def snapshot_data(index: int, h: bytes) -> bytes:
    """A snapshot of the simulated state machine: its applied index and chain hash."""
    return b"sm:%d:" % index + h.hex().encode()


def parse_snapshot_data(data: bytes) -> tuple[int, bytes]:
    _, idx, h = data.split(b":")
    return int(idx), bytes.fromhex(h.decode())


def describe_msg(m: Message) -> str:
    s = f"{m.src}->{m.dst} {m.type.name} t{m.term}"
    if m.type in (MessageType.APPEND, MessageType.APPEND_RESPONSE, MessageType.VOTE, MessageType.PRE_VOTE):
        s += f" lt{m.log_term} i{m.index}"
    if m.entries:
        s += f" ents={m.entries[0].index}..{m.entries[-1].index}"
    if m.commit:
        s += f" c{m.commit}"
    if m.reject:
        s += f" REJECT hint{m.reject_hint}"
    if m.snapshot is not None:
        s += f" snap@{m.snapshot.index}/t{m.snapshot.term}"
    return s


@dataclass
class SimNode:
    """One member: its storage survives crashes; ``raft`` is None while it is down."""

    id: str
    storage: SimStorage
    raft: object | None = None
    incarnation: int = 0
    inflight: Ready | None = None          # persisted (volatile), waiting for its sync
    # the simulated state machine: the applied (index, term, data), summarised
    sm_index: int = 0
    sm_hash: bytes = b""
    applied: list[tuple[int, int, bytes]] = field(default_factory=list)  # kept when record_applied
    #: False after a wipe until the node is admitted again: it may not vote (can_vote)
    admitted: bool = True

    @property
    def up(self) -> bool:
        return self.raft is not None


class Checker:
    """Tracks the history of the run and checks RAFT's safety properties incrementally."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.leaders: dict[int, str] = {}                # term -> the one leader of that term
        self.entries: dict[tuple[int, int], tuple[int, int, bytes]] = {}  # (index, term) -> (prev term, type, data)
        self.applied: list[tuple[int, bytes]] = [(0, b"")]  # index -> (term, data) first applied there
        self.chain: list[bytes] = [b""]                  # index -> state machine hash after applying it
        self.commit_term: list[int] = [0]               # index -> term in which it was first seen committed
        self.durable_term: dict[str, int] = {}

    def fail(self, invariant: str, detail: str) -> None:
        raise InvariantViolation(invariant, detail)

    # -- election safety, commit observation ------------------------------------------------

    def observe(self, sn: SimNode) -> None:
        """After any primitive touching ``sn``."""
        r = sn.raft
        if r is None:
            return
        term = r.term
        if r.role is Role.LEADER:
            prev = self.leaders.get(term)
            if prev is None:
                self.leaders[term] = sn.id
                self._check_leader_completeness(sn, term, "on becoming leader")
            elif prev != sn.id:
                self.fail("election safety", f"two leaders in term {term}: {prev} and {sn.id}")
        commit = r.commit_index
        ct = self.commit_term
        if commit >= len(ct):
            ct.extend([term] * (commit + 1 - len(ct)))

    # -- log matching and leader append-only, at persistence -------------------------------

    def on_persist(self, sn: SimNode, rd: Ready, term: int, leader: bool) -> None:
        """Before ``rd`` is written to ``sn``'s storage."""
        st = sn.storage
        if rd.snapshot is not None:
            self.check_snapshot(sn, rd.snapshot, "installed from the leader")
        ents = rd.entries
        if not ents:
            return
        first = ents[0].index
        if rd.snapshot is not None:
            prev_term = rd.snapshot.term if first == rd.snapshot.index + 1 else None
        else:
            prev_term = st.view.term_at(first - 1)
        if leader and self.leaders.get(term) == sn.id and first <= st.last_index():
            self.fail(
                "leader append-only",
                f"{sn.id}, leader of term {term}, overwrites its log from index {first} "
                f"(last index {st.last_index()})",
            )
        known = self.entries
        for e in ents:
            if e.index != first:
                self.fail("log matching", f"{sn.id} persists non-contiguous entries {[x.index for x in ents]}")
            first += 1
            if prev_term is None:
                if e.index - 1 > st.view.last_index() and rd.snapshot is None:
                    self.fail("log matching", f"{sn.id} appends index {e.index} after a gap")
                prev_term = -1  # compacted predecessor: checked through the snapshot
            if prev_term != -1 and e.term < prev_term:
                self.fail("log matching", f"{sn.id}: entry {e.index} has term {e.term} < previous term {prev_term}")
            key = (e.index, e.term)
            val = (prev_term, int(e.type), e.data)
            old = known.get(key)
            if old is None:
                known[key] = val
            elif old[1:] != val[1:] or (old[0] != -1 and prev_term != -1 and old[0] != prev_term):
                self.fail(
                    "log matching",
                    f"{sn.id} holds entry index {e.index} term {e.term} = {val!r} but another log "
                    f"holds it as {old!r} (same index and term, different entries or prefixes)",
                )
            prev_term = e.term

    def after_persist(self, sn: SimNode, term: int, leader: bool) -> None:
        if leader and self.leaders.get(term) == sn.id:
            self._check_leader_completeness(sn, term, "after persisting its log")

    def check_snapshot(self, sn: SimNode, snap: Snapshot, how: str) -> None:
        if snap.index == 0:
            return
        idx, h = parse_snapshot_data(snap.data)
        if idx != snap.index:
            self.fail("state machine safety", f"snapshot at {snap.index} carries state of index {idx} ({how}, {sn.id})")
        if snap.index >= len(self.chain):
            self.fail("state machine safety", f"{sn.id} got a snapshot at {snap.index} beyond anything applied ({how})")
        if self.chain[snap.index] != h or self.applied[snap.index][0] != snap.term:
            self.fail(
                "state machine safety",
                f"{sn.id}: snapshot at index {snap.index} term {snap.term} ({how}) differs from the "
                f"state every node applied up to {snap.index}",
            )

    # -- leader completeness ----------------------------------------------------------------

    def _check_leader_completeness(self, sn: SimNode, term: int, when: str) -> None:
        # the highest index applied anywhere that was seen committed in a term before ``term``
        top = len(self.applied) - 1
        ct = self.commit_term
        while top > 0 and (top >= len(ct) or ct[top] >= term):
            top -= 1
        if top <= 0:
            return
        view = sn.storage.view
        have = view.term_at(top)
        if have is None and top <= view.snap.index:
            return  # compacted into the snapshot, which was checked against the applied state
        want = self.applied[top][0]
        if have != want:
            self.fail(
                "leader completeness",
                f"{sn.id}, leader of term {term} ({when}), lacks entry {top} (term {want}), committed "
                f"in term {ct[top]}; its log has {'no entry' if have is None else f'term {have}'} there "
                f"(last index {view.last_index()})",
            )

    # -- state machine safety ---------------------------------------------------------------

    def on_apply(self, sn: SimNode, e: Entry) -> None:
        if e.index != sn.sm_index + 1:
            self.fail(
                "state machine safety",
                f"{sn.id} applies index {e.index} after {sn.sm_index} (applied out of order or twice)",
            )
        h = chain_hash(sn.sm_hash, e.term, e.data)
        if e.index < len(self.applied):
            t, d = self.applied[e.index]
            if (t, d) != (e.term, e.data) or self.chain[e.index] != h:
                self.fail(
                    "state machine safety",
                    f"{sn.id} applies index {e.index} = (term {e.term}, {e.data!r}) but (term {t}, {d!r}) "
                    f"was applied there before",
                )
        else:
            self.applied.append((e.term, e.data))
            self.chain.append(h)
            if e.index >= len(self.commit_term):
                self.commit_term.append(sn.raft.term if sn.raft is not None else 0)
        sn.sm_index = e.index
        sn.sm_hash = h

    def on_restore(self, sn: SimNode, snap: Snapshot, how: str) -> None:
        """``sn``'s state machine is reset to ``snap``."""
        self.check_snapshot(sn, snap, how)
        if snap.index == 0:
            sn.sm_index, sn.sm_hash = 0, b""
        else:
            sn.sm_index, sn.sm_hash = parse_snapshot_data(snap.data)

    # -- durability of committed entries ----------------------------------------------------

    def check_durable_quorum(self, peers: Iterable[str]) -> None:
        """Every entry applied anywhere is durable on a majority of ``peers``."""
        top = len(self.applied) - 1
        if top <= 0:
            return
        want = self.applied[top][0]
        peers = list(peers)
        have = []
        for pid in peers:
            d = self.cluster.nodes[pid].storage.durable
            if d.snap.index >= top or d.term_at(top) == want:
                have.append(pid)
        if len(have) * 2 <= len(peers):
            self.fail(
                "committed entry durable on a quorum",
                f"entry {top} (term {want}) was applied but is durable only on {have} of {peers}",
            )


class Cluster:
    """N nodes of one group and the primitives that drive them (manual mode: messages wait
    in ``mailbox`` until delivered or dropped)."""

    def __init__(
        self,
        n: int = 3,
        *,
        seed: int = 0,
        node_cls=None,
        election_ticks: int = 10,
        heartbeat_ticks: int = 1,
        pre_vote: bool = True,
        check_quorum: bool = True,
        max_entries_per_message: int = 1024,
        record_applied: bool = True,
        trace_len: int = 200,
        node_cls_for: Callable[[str], object] | None = None,
    ) -> None:
        self.ids = [f"n{i}" for i in range(1, n + 1)]
        self.node_cls = node_cls or default_node_cls()
        self.node_cls_for = node_cls_for
        self.cfg = dict(
            election_ticks=election_ticks,
            heartbeat_ticks=heartbeat_ticks,
            pre_vote=pre_vote,
            check_quorum=check_quorum,
            max_entries_per_message=max_entries_per_message,
        )
        self.seed = seed
        self.record_applied = record_applied
        self.nodes: dict[str, SimNode] = {}
        self.checker = Checker(self)
        self.mailbox: list[Message] = []
        self.trace: collections.deque = collections.deque(maxlen=trace_len)
        self.now = 0
        self.events: list[tuple[str, str, dict]] = []   # on_event calls: (node, name, fields)
        self.record_events = False
        self.record_delivered = False
        self.delivered: list[Message] = []
        for pid in self.ids:
            self.nodes[pid] = SimNode(pid, SimStorage(tuple(self.ids)))
            self.start(pid)

    # -- trace ----------------------------------------------------------------------------

    def note(self, what: str, *args) -> None:
        self.trace.append((self.now, what, args))

    def format_trace(self) -> str:
        out = []
        for now, what, args in self.trace:
            if what == "deliver":
                out.append(f"{now:>8} deliver {describe_msg(args[0])}")
            else:
                out.append(f"{now:>8} {what} {' '.join(str(a) for a in args)}")
        return "\n".join(out)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, pid: str) -> None:
        sn = self.nodes[pid]
        sn.incarnation += 1
        cls = self.node_cls_for(pid) if self.node_cls_for else self.node_cls
        cfg = RaftConfig(
            id=pid,
            group=GROUP,
            peers=tuple(self.ids),
            seed=self.seed * 1000 + int(pid[1:]) * 37 + sn.incarnation,
            **self.cfg,
        )
        hook = (lambda name, fields, _pid=pid: self._on_event(_pid, name, fields))
        sn.raft = cls(cfg, sn.storage, on_event=hook, can_vote=lambda _sn=sn: _sn.admitted)
        sn.inflight = None
        self.checker.on_restore(sn, sn.storage.view.snap, "restart")
        if self.record_applied:
            sn.applied = [a for a in sn.applied if a[0] <= sn.sm_index] if sn.sm_index else []
        self.note("start", pid, f"inc{sn.incarnation}", f"term{sn.raft.term}", f"last{sn.storage.last_index()}")

    def _on_event(self, pid: str, name: str, fields: dict) -> None:
        if self.record_events:
            self.events.append((pid, name, dict(fields)))

    def crash(self, pid: str, keep: int | None = None) -> None:
        """Stop ``pid``: its unsent messages and unapplied entries are gone, and every write
        not yet synced is lost (``keep``: a torn append keeps its first ``keep`` entries)."""
        sn = self.nodes[pid]
        sn.raft = None
        sn.inflight = None
        sn.storage.crash(keep)
        self.note("crash", pid, "" if keep is None else f"torn keep={keep}")

    def restart(self, pid: str) -> None:
        self.start(pid)
        self.checker.observe(self.nodes[pid])

    def wipe(self, pid: str, peers: tuple[str, ...]) -> None:
        """Stop ``pid`` and lose its whole store (a wiped disk, a new machine under the same
        name): it comes back empty, knowing the group's voters ``peers`` but not itself, and
        may not vote until admitted again (see RandomSim's admission)."""
        sn = self.nodes[pid]
        sn.raft = None
        sn.inflight = None
        sn.storage = SimStorage(tuple(p for p in peers if p != pid))
        sn.sm_index, sn.sm_hash, sn.applied = 0, b"", []
        sn.admitted = False
        self.checker.durable_term.pop(pid, None)    # its terms start again: a new store
        self.note("wipe", pid)

    # -- primitives ---------------------------------------------------------------------------

    def tick(self, pid: str, n: int = 1) -> None:
        sn = self.nodes[pid]
        for _ in range(n):
            sn.raft.tick()
        self.note("tick", pid, n)
        self.checker.observe(sn)

    def step(self, msg: Message) -> None:
        sn = self.nodes[msg.dst]
        self.note("deliver", msg)
        if self.record_delivered:
            self.delivered.append(msg)
        sn.raft.step(msg)
        self.checker.observe(sn)

    def persist(self, pid: str) -> Ready | None:
        """Take ``pid``'s Ready and write it to storage (volatile); None if nothing is ready
        or a Ready is already waiting for its sync."""
        sn = self.nodes[pid]
        r = sn.raft
        if r is None or sn.inflight is not None or not r.has_ready():
            return None
        rd = r.ready()
        term = r.term
        leader = r.role is Role.LEADER
        self.checker.on_persist(sn, rd, term, leader)
        st = sn.storage
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
        if rd.entries:
            st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        self.checker.after_persist(sn, term, leader)
        sn.inflight = rd
        self.note(
            "persist",
            pid,
            f"ents={len(rd.entries)}" + (f"@{rd.entries[0].index}" if rd.entries else ""),
            f"hs={rd.hard_state}" if rd.hard_state is not None else "",
            f"snap@{rd.snapshot.index}" if rd.snapshot is not None else "",
            f"msgs={len(rd.messages)} commit_ents={len(rd.committed_entries)} sync={rd.must_sync}",
        )
        return rd

    def complete(self, pid: str, send: Callable[[Message], None] | None = None, fsync: bool = True) -> Ready | None:
        """fsync ``pid``'s persisted Ready (if ``fsync``), then send its messages, restore the
        snapshot / apply its committed entries, and advance."""
        sn = self.nodes[pid]
        rd = sn.inflight
        if rd is None or sn.raft is None:
            return None
        if fsync:
            sn.storage.sync()
            d = sn.storage.durable.hs
            if d.term < self.checker.durable_term.get(pid, 0):
                self.checker.fail("term monotonicity", f"{pid} durably went back to term {d.term}")
            self.checker.durable_term[pid] = d.term
        send = send or self.mailbox.append
        for m in rd.messages:
            send(m)
        if rd.snapshot is not None:
            self.checker.on_restore(sn, rd.snapshot, "snapshot from the leader")
            if self.record_applied:
                sn.applied = [("snapshot", rd.snapshot.index, rd.snapshot.term)]  # type: ignore[list-item]
        for e in rd.committed_entries:
            if e.index <= sn.sm_index:
                # already covered by a snapshot this node restored; must match what it holds
                if e.index < len(self.checker.applied) and self.checker.applied[e.index] != (e.term, e.data):
                    self.checker.fail("state machine safety", f"{pid} re-delivers a different entry at {e.index}")
                continue
            self.checker.on_apply(sn, e)
            if self.record_applied:
                sn.applied.append((e.index, e.term, e.data))
        sn.inflight = None
        sn.raft.advance(rd)
        self.note("sync+send+apply", pid, f"msgs={len(rd.messages)} applied->{sn.sm_index}")
        self.checker.observe(sn)
        return rd

    def process_ready(self, pid: str) -> Ready | None:
        """persist + sync + send + apply + advance, in one go (manual mode)."""
        rd = self.persist(pid)
        if rd is None:
            return None
        return self.complete(pid, fsync=True)

    def propose(self, pid: str, data: bytes) -> None:
        self.note("propose", pid, data)
        self.nodes[pid].raft.propose(data)
        self.checker.observe(self.nodes[pid])

    def propose_config_change(self, pid: str, cc: ConfigChange) -> None:
        self.note("confchange", pid, cc.type.name, cc.peer)
        self.nodes[pid].raft.propose_config_change(cc)
        self.checker.observe(self.nodes[pid])

    def transfer(self, pid: str, to: str) -> None:
        self.note("transfer", pid, to)
        self.nodes[pid].raft.transfer_leadership(to)
        self.checker.observe(self.nodes[pid])

    def campaign(self, pid: str) -> None:
        self.note("campaign", pid)
        self.nodes[pid].raft.campaign()
        self.checker.observe(self.nodes[pid])

    def snapshot(self, pid: str, index: int | None = None, compact_to: int | None = None) -> Snapshot | None:
        """Snapshot ``pid``'s state machine at its applied index and compact its log up to
        ``compact_to`` (default: the snapshot index)."""
        sn = self.nodes[pid]
        if index is None:
            index = sn.sm_index
        if index != sn.sm_index or index <= sn.storage.view.snap.index:
            return None
        snap = sn.storage.create_snapshot(index, snapshot_data(sn.sm_index, sn.sm_hash))
        self.checker.check_snapshot(sn, snap, "taken locally")
        sn.storage.compact(index if compact_to is None else compact_to)
        self.note("snapshot+compact", pid, f"@{index}")
        return snap

    # -- manual-mode message control (etcd interaction style) ---------------------------

    def deliver(self, pred: Callable[[Message], bool] | None = None) -> int:
        """Deliver (in order) every mailbox message matching ``pred`` (those to a node that
        is down are lost); returns how many were delivered."""
        keep, todo = [], []
        for m in self.mailbox:
            (todo if pred is None or pred(m) else keep).append(m)
        self.mailbox = keep
        n = 0
        for m in todo:
            if self.nodes[m.dst].raft is None:
                continue
            self.step(m)
            n += 1
        return n

    def drop(self, pred: Callable[[Message], bool] | None = None) -> int:
        before = len(self.mailbox)
        self.mailbox = [m for m in self.mailbox if not (pred is None or pred(m))]
        return before - len(self.mailbox)

    # -- queries ------------------------------------------------------------------------------

    def leader(self) -> str | None:
        """The up node that is leader in the highest term, if any."""
        best = None
        for pid in self.ids:
            r = self.nodes[pid].raft
            if r is not None and r.role is Role.LEADER and (best is None or r.term > self.nodes[best].raft.term):
                best = pid
        return best

    def log(self, pid: str) -> list[tuple[int, int]]:
        """(index, term) of every entry in ``pid``'s log (synced or not) after its snapshot."""
        return [(e.index, e.term) for e in self.nodes[pid].storage.view.log()]

    def applied_data(self, pid: str) -> list[bytes]:
        return [a[2] for a in self.nodes[pid].applied if len(a) == 3 and isinstance(a[0], int)]


__all__ = ["Checker", "Cluster", "GROUP", "InvariantViolation", "SimNode", "default_node_cls", "describe_msg"]
