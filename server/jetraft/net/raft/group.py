"""RaftGroup: the handle of one RAFT group hosted by a :class:`~jetraft.net.raft.host.RaftHost`.

A group's owner (a stream, a consumer, the meta group) reads its state from the handle
(leader, term, peers, commit and applied index, the leader's view of its replicas in the
shape of nats-server's stream info ``cluster.replicas``) and changes it through the handle
(:meth:`RaftGroup.propose`, :meth:`~RaftGroup.step_down`, :meth:`~RaftGroup.campaign`,
:meth:`~RaftGroup.add_peer`, :meth:`~RaftGroup.remove_peer`); each request wakes the host's
processing pass. What the group replicates is its :class:`StateMachine`.

The host's pass calls the group's share of each step (see jetraft.net.raft.host): write a
Ready to the group's log (:meth:`~RaftGroup.persist`), hand what is newly committed to the
state machine (:meth:`~RaftGroup.apply_ready`), take a snapshot where due
(:meth:`~RaftGroup.maybe_snapshot`), report a change of leader
(:meth:`~RaftGroup.check_leader`) and, once per tick on the leader, log the changes of
each replica's state (:meth:`~RaftGroup.track_replicas`).
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from jetraft.raft.memory import apply_membership
from jetraft.raft.node import RaftNode
from jetraft.raft.storage import GroupLog
from jetraft.raft.types import (
    ConfigChange,
    ConfigChangeType,
    Entry,
    EntryType,
    NotLeaderError,
    ProposalDroppedError,
    Ready,
    Role,
    Snapshot,
)

__all__ = ["BACKLOG_BATCH", "CURRENT_LAG", "MAX_READS", "GroupHost", "RaftGroup", "SnapshotPolicy",
           "StateMachine"]

#: A follower at most this many entries behind the leader's last index is "current".
CURRENT_LAG = 32

#: Entries a group applies from its own log per pass after its state machine held them back.
BACKLOG_BATCH = 4096

#: Reads (:meth:`RaftGroup.read`) a group's leader holds at once, waiting for their read
#: index or for the state machine to reach it; more are refused.
MAX_READS = 4096


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When a group snapshots its state machine and compacts its log (Raft §7): once
    ``entries`` entries or ``bytes`` bytes of entry data were applied since the last
    snapshot, or ``interval_ns`` ns passed since it with at least one entry applied.
    The defaults are nats-server's for stream groups (server/jetstream_cluster.go
    monitorStream: compactNumMin 65536, compactSizeMin 8 MiB, compactInterval 2 min)."""

    entries: int = 65536
    bytes: int = 8 << 20
    interval_ns: int = 120 * 1_000_000_000

    def __post_init__(self) -> None:
        if self.entries < 1 or self.bytes < 1 or self.interval_ns < 1:
            raise ValueError("snapshot thresholds must be positive")

_CONFIG = EntryType.CONFIG_CHANGE

#: zlib.crc32 of each entry type's number as one byte: an entry's raft_applied hash is
#: ``zlib.crc32(data, _TYPE_CRC[type])`` = ``zlib.crc32(bytes([type]) + data)``, without the copy.
_TYPE_CRC = {t: zlib.crc32(bytes((t,))) for t in EntryType}


class GroupHost(Protocol):
    """What a :class:`RaftGroup` needs of its host (:class:`~jetraft.net.raft.host.RaftHost`)."""

    #: This server's name (its id in every group).
    server_name: str
    #: Servers the transport reported unreachable and not back yet.
    down: set[str]
    #: A follower's election timeout, in ns: a peer not heard for longer is offline.
    election_timeout_ns: int

    def touch(self, g: RaftGroup) -> None:
        """``g`` may have a Ready: include it in the next pass."""
        ...

    def wants_event(self, name: str) -> bool:
        """Whether event ``name`` would be written."""
        ...

    def group_event(self, g: RaftGroup, name: str, fields: dict) -> None:
        """Write RAFT event ``name`` of ``g`` (the host adds the node's state to ``fields``)."""
        ...


class StateMachine(Protocol):
    """What a group replicates; called by the host only, from its processing pass."""

    def apply(self, entries: list[Entry]) -> None:
        """Committed entries, in log order, each once per process lifetime after the last
        restore: NORMAL entries (a new leader's empty no-op included) and CONFIG_CHANGE
        entries (so that the state machine sees every index)."""
        ...

    def snapshot(self) -> bytes | None:
        """The state as of the last applied entry; None: take no snapshot, keep the log."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's data. A state machine may need time to
        complete it (fetching data the snapshot only describes): it then reports
        ``holding`` True until done, and the group applies nothing and does not campaign
        meanwhile (see :attr:`RaftGroup.holding`)."""
        ...

    def leader_changed(self, leader: str | None, term: int) -> None:
        """This server's view of the group's leader changed (to itself included)."""
        ...


class RaftGroup:
    """One group hosted by a :class:`RaftHost`. Read the state from the properties; change
    it with :meth:`propose`, :meth:`step_down`, :meth:`campaign`, :meth:`add_peer` and
    :meth:`remove_peer` (each wakes the host's processing pass). ``commit_broadcast``: the
    node's :class:`~jetraft.raft.types.Config` setting, kept for the nodes the host makes
    for the group when it reopens it."""

    def __init__(self, host: GroupHost, name: str, log: GroupLog, sm: StateMachine, *,
                 commit_broadcast: bool = True, policy: SnapshotPolicy | None = None) -> None:
        self.name = name
        self.host = host
        self.log = log
        self.sm = sm
        self.node: RaftNode = None  # type: ignore[assignment]  # set by the host when it opens the group
        #: Wall-clock ns (time.time_ns) when this server first saw the current leader.
        self.leader_since_ns: int | None = None
        snap = log.snapshot()
        self._applied = snap.index
        self._applied_term = snap.term                # the term of the entry at _applied
        # the configuration (voters, learners) at _applied
        self._applied_conf = (tuple(snap.peers), tuple(snap.learners))
        self._snapshot_retry = 0                      # applied index to ask for one again
        self.policy = policy if policy is not None else SnapshotPolicy()
        self._since_bytes = 0                         # entry bytes applied since the snapshot
        self._snapshot_mono_ns = time.monotonic_ns()  # when the last snapshot was taken
        self._backlog = False                         # committed entries held back (holding)
        #: GroupLog options the host reopens the log with (segment_bytes).
        self.log_options: dict = {}
        self._seen: tuple[str | None, int] = (None, 0)  # (leader, term) last reported
        #: Leaders (a new server, or a new term of the same one) reported since the group
        #: was opened here (/metrics jetraft_raft_leader_changes_total).
        self.leader_changes = 0
        self._heard: dict[str, int] = {}              # peer -> time.time_ns() last heard
        self._opened_ns = time.time_ns()
        self._applied_event: trio.Event | None = None
        self.closed = False
        #: The exception that stopped this group on this server (see the module
        #: docstring), and what failed: "write" | "fsync" | "read" | "apply"; None: running.
        self.failed: BaseException | None = None
        self.failed_op: str | None = None
        self.commit_broadcast = commit_broadcast
        # raft_replica_current/_lagging on the leader: the term the states belong to (0: not
        # tracking) and, per other peer, (current, time.time_ns() it entered that state).
        self._replica_term = 0
        self._replica_state: dict[str, tuple[bool, int]] = {}
        #: On the leader: peers completing a snapshot from a peer's store (see
        #: :meth:`note_catchup`): peer -> (the index their state machine is at, when heard, ns).
        self._catchup: dict[str, tuple[int, int]] = {}
        #: On the leader: peers that said they completed a snapshot (:meth:`catchup_done`).
        self.caught_up: set[str] = set()
        # ReadIndex reads (see :meth:`read`): context -> (term, serve, refuse) until the
        # node confirms them, then (read index, serve) in the order confirmed until applied
        self._read_prefix = os.urandom(8)
        self._read_seq = 0
        self._reads: dict[bytes, tuple[int, Callable[[], None], Callable[[], None]]] = {}
        self._reads_confirmed: list[tuple[int, Callable[[], None], Callable[[], None]]] = []

    # -- state ---------------------------------------------------------------------------

    @property
    def leader(self) -> str | None:
        return None if self.failed is not None else self.node.leader

    @property
    def term(self) -> int:
        return self.node.term

    @property
    def is_leader(self) -> bool:
        return self.failed is None and self.node.role is Role.LEADER

    @property
    def peers(self) -> tuple[str, ...]:
        """The latest configuration in the log (thesis §4.1), committed or not."""
        return self.node.peers

    @property
    def commit_index(self) -> int:
        return self.node.commit_index

    @property
    def commit_current(self) -> bool:
        """The commit index covers an entry of the current term (:attr:`RaftNode.commit_current`)."""
        return self.failed is None and self.node.commit_current

    @property
    def holding(self) -> bool:
        """True while the state machine completes a restore (see :class:`StateMachine`):
        nothing is applied and this server does not campaign for the group."""
        return bool(getattr(self.sm, "holding", False))

    def can_lead(self) -> bool:
        """The node's ``can_lead`` hook: not while :attr:`holding`, nor while it may not
        vote."""
        return not self.holding and self.can_vote()

    def can_vote(self) -> bool:
        """The node's ``can_vote`` hook: the state machine's ``may_vote`` (default True)."""
        return bool(getattr(self.sm, "may_vote", True))

    @property
    def applied_index(self) -> int:
        """The index of the last entry handed to the state machine (or restored)."""
        return self._applied

    def __repr__(self) -> str:
        return (f"RaftGroup({self.name!r}, {self.host.server_name}, {self.node.role.value}, "
                f"term={self.term}, leader={self.leader}, applied={self._applied})")

    # -- requests ------------------------------------------------------------------------

    def propose(self, data: bytes) -> int:
        """Append ``data`` as a NORMAL entry on the leader; returns its log index (it is
        applied everywhere once committed: see :meth:`wait_applied`). Raises NotLeaderError
        on a follower (proposals are not forwarded: the caller answers or redirects) and
        ProposalDroppedError while a leadership transfer runs or after close."""
        node = self._live()
        if node.role is not Role.LEADER:
            raise NotLeaderError(node.leader)
        node.propose(data)
        self.host.touch(self)
        return node.last_index

    def read(self, serve: Callable[[], None], refuse: Callable[[], None]) -> None:
        """A linearizable read (ReadIndex, Raft thesis §6.4): call ``serve`` from a later
        pass of the host once this server, as the group's leader, confirmed with a
        heartbeat round that it still led after the call, and applied every entry
        committed at the call. A new leader confirms only once an entry of its own term is
        committed (Raft §8), a deposed one never; ``refuse`` is called instead when the
        node loses leadership (or a term passes) before it confirms. A read confirmed is
        served even if leadership is lost afterwards (it was current when confirmed).
        Raises NotLeaderError on a follower, ProposalDroppedError after close or with
        :data:`MAX_READS` reads waiting."""
        node = self._live()
        if node.role is not Role.LEADER:
            raise NotLeaderError(node.leader)
        if len(self._reads) + len(self._reads_confirmed) >= MAX_READS:
            raise ProposalDroppedError(f"{MAX_READS} reads are waiting")
        self._read_seq += 1
        ctx = self._read_prefix + self._read_seq.to_bytes(8, "big")
        node.read_index(ctx)
        self._reads[ctx] = (node.term, serve, refuse)
        self.host.touch(self)

    @property
    def reads_waiting(self) -> int:
        """Reads taken by :meth:`read` and not yet served or refused."""
        return len(self._reads) + len(self._reads_confirmed)

    def _confirm_reads(self, rd: Ready) -> None:
        """Take the read states of ``rd`` (reads the node confirmed) and serve each one
        the state machine has reached, in the order confirmed."""
        reads = self._reads
        for rs in rd.read_states:
            got = reads.pop(rs.context, None)
            if got is not None:
                self._reads_confirmed.append((rs.index, got[1], got[2]))
        self._serve_reads()

    def _serve_reads(self) -> None:
        confirmed = self._reads_confirmed
        if not confirmed or confirmed[0][0] > self._applied or self.holding:
            return
        n = 0
        while n < len(confirmed) and confirmed[n][0] <= self._applied:
            n += 1
        due, self._reads_confirmed = confirmed[:n], confirmed[n:]
        for _index, serve, _refuse in due:
            serve()

    def drop_reads(self) -> None:
        """Refuse every read waiting (the group stopped or closed on this server)."""
        waiting = [r for _t, _s, r in self._reads.values()] + [r for _i, _s, r in self._reads_confirmed]
        self._reads.clear()
        self._reads_confirmed = []
        for refuse in waiting:
            refuse()

    def _refuse_lost_reads(self) -> None:
        """Refuse the reads the node will not confirm: it no longer leads, or leads in a
        later term (the node dropped them when its term or role changed)."""
        node = self.node
        term = node.term if node.role is Role.LEADER else -1
        lost = [ctx for ctx, (t, _s, _r) in self._reads.items() if t != term]
        for ctx in lost:
            _t, _serve, refuse = self._reads.pop(ctx)
            refuse()

    def step_down(self, to: str | None = None) -> str | None:
        """Hand leadership to ``to``, or to the most up-to-date peer heard from within an
        election timeout (ties: the first by name). Returns the target, or None when there
        is no other peer to take over. Leadership moves when the target, brought up to
        date, receives TimeoutNow (thesis §3.10); abandoned after an election timeout.
        NotLeaderError on a follower; ValueError for a server outside the group or self."""
        node = self._live()
        if node.role is not Role.LEADER:
            raise NotLeaderError(node.leader)
        me = self.host.server_name
        if to is None:
            now = time.time_ns()
            progress = node.progress()
            live = [(-progress[p]["match"], p) for p in node.peers
                    if p != me and p in progress and not self._offline(p, now)]
            if not live:
                return None
            to = min(live)[1]
        elif to == me:
            raise ValueError(f"{me} is the leader of {self.name} already")
        node.transfer_leadership(to)
        self.host.touch(self)
        return to

    def campaign(self) -> None:
        """Start an election now (pre-vote first) instead of waiting for a timeout: for a
        brand-new group, on one of its peers."""
        self._live().campaign()
        self.host.touch(self)

    @property
    def learners(self) -> tuple[str, ...]:
        """Members that receive the log but do not vote (see :meth:`add_learner`)."""
        return self.node.learners

    @property
    def config_settled(self) -> bool:
        """On the leader: every configuration change in the log is committed."""
        return self.node.role is Role.LEADER and not self.node.config_pending

    def add_peer(self, peer: str) -> None:
        """Propose adding ``peer`` (thesis §4.1, one server at a time). Leader only; see
        :meth:`RaftNode.propose_config_change` for the errors. The new server should open
        the group with the current peers *without* itself, so it cannot campaign before
        it is a member."""
        self._change(ConfigChangeType.ADD_PEER, peer)

    def add_learner(self, peer: str) -> None:
        """Propose adding ``peer`` as a learner (thesis §4.2.1): it receives the log but
        does not vote until :meth:`promote`. Errors as :meth:`add_peer`."""
        self._change(ConfigChangeType.ADD_LEARNER, peer)

    def promote(self, peer: str) -> None:
        """Propose making learner ``peer`` a voter (ValueError if it is no learner)."""
        self._change(ConfigChangeType.PROMOTE_LEARNER, peer)

    def remove_peer(self, peer: str) -> None:
        """Propose removing ``peer``, a voter or a learner (a removed leader steps down once
        it is committed)."""
        kind = (ConfigChangeType.REMOVE_LEARNER if peer in self.node.learners
                else ConfigChangeType.REMOVE_PEER)
        self._change(kind, peer)

    def _change(self, kind: ConfigChangeType, peer: str) -> None:
        self._live().propose_config_change(ConfigChange(kind, peer))
        self.host.touch(self)

    def member_current(self, peer: str, now_ns: int) -> bool:
        """On the leader: ``peer`` (voter or learner) has answered, is online and at most
        :data:`CURRENT_LAG` entries behind (``now_ns``: time.time_ns()). False elsewhere."""
        node = self.node
        if node.role is not Role.LEADER or not node.match_index(peer):
            return False
        return not self._offline(peer, now_ns) and self._lag(peer, node.last_index, now_ns) <= CURRENT_LAG

    def heard_ns(self, peer: str) -> int | None:
        """Wall-clock ns (time.time_ns) when a message from ``peer`` last arrived, or None."""
        return self._heard.get(peer)

    def replicas(self, now_ns: int) -> list[dict]:
        """On the leader, one dict per other peer of the configuration: ``name``,
        ``current`` (online and at most :data:`CURRENT_LAG` entries behind), ``active_ns``
        (ns since last heard, against ``now_ns`` = ``time.time_ns()``), ``lag`` (entries
        behind the leader's last index) and ``offline`` (not heard within an election
        timeout, or reported down by the transport). [] on a follower. The shape of
        nats-server's stream info ``cluster.replicas`` (stream.go PeerInfo)."""
        node = self.node
        if node.role is not Role.LEADER or self.failed is not None:
            return []
        last = node.last_index
        me = self.host.server_name
        out = []
        for p in node.peers:
            if p == me:
                continue
            lag = self._lag(p, last, now_ns)
            offline = self._offline(p, now_ns)
            out.append({"name": p, "current": not offline and lag <= CURRENT_LAG,
                        "active_ns": max(0, now_ns - self._heard.get(p, self._opened_ns)),
                        "lag": lag, "offline": offline})
        return out

    def _lag(self, peer: str, last: int, now_ns: int | None = None) -> int:
        """On the leader: entries ``peer`` is behind ``last`` (the leader's last index); a
        peer completing a snapshot (:meth:`note_catchup`) counts from its state machine's
        index, however complete its log."""
        lag = max(0, last - (self.node.match_index(peer) or 0))
        c = self._catchup.get(peer)
        if c is not None:
            if now_ns is not None and now_ns - c[1] > 3 * self.host.election_timeout_ns:
                del self._catchup[peer]         # not heard of since: no longer catching up
            else:
                lag = max(lag, last - c[0], CURRENT_LAG + 1)
        return lag

    def note_catchup(self, peer: str, applied: int, now_ns: int) -> None:
        """On the leader: ``peer`` is fetching a snapshot's messages and its state machine is
        at ``applied`` (wall-clock ``now_ns``); it is reported lagging until
        :meth:`catchup_done` or three election timeouts without news."""
        self._catchup[peer] = (applied, now_ns)

    def catchup_done(self, peer: str) -> None:
        """``peer`` completed a snapshot: its store holds the snapshot's messages (fsynced)."""
        self._catchup.pop(peer, None)
        self.caught_up.add(peer)

    def adopt_snapshot(self, snap: Snapshot) -> None:
        """Restore the state machine from a peer's snapshot ``snap`` (newer than what it has
        applied) when the one it was completing can no longer be (a block it needs was
        deleted everywhere). Entries up to ``snap.index`` are not applied here then; those
        after it are, from the log, as they commit. ValueError when ``snap`` is not newer."""
        if snap.index <= self._applied:
            raise ValueError(f"snapshot {snap.index} is not past applied index {self._applied}")
        self.sm.restore(snap.data)
        self._applied = snap.index
        self._applied_term = snap.term
        self._applied_conf = (tuple(snap.peers), tuple(snap.learners))
        self._since_bytes = 0
        self._backlog = True
        self.host.group_event(self, "raft_snapshot_installed", {
            "group": self.name, "index": snap.index, "term": snap.term})
        self.host.touch(self)

    def _offline(self, peer: str, now_ns: int) -> bool:
        return (peer in self.host.down
                or now_ns - self._heard.get(peer, self._opened_ns) > self.host.election_timeout_ns)

    async def wait_applied(self, index: int) -> None:
        """Return once the state machine has applied ``index`` (or a snapshot past it).
        Raises trio.ClosedResourceError if the group is closed first."""
        while self._applied < index:
            if self.closed:
                raise trio.ClosedResourceError(f"RAFT group {self.name} closed")
            if self._applied_event is None:
                self._applied_event = trio.Event()
            await self._applied_event.wait()

    # -- the host's side: called by RaftHost only ---------------------------------------

    def heard_from(self, peer: str, now_ns: int) -> None:
        """A message from ``peer`` arrived at wall-clock ``now_ns`` (time.time_ns)."""
        self._heard[peer] = now_ns

    def _live(self) -> RaftNode:
        if self.closed:
            raise ProposalDroppedError(f"RAFT group {self.name} is closed")
        if self.failed is not None:
            raise ProposalDroppedError(f"RAFT group {self.name} stopped: {self.failed}")
        return self.node

    def persist(self, rd: Ready) -> None:
        """Step 1 of a pass: write the Ready (durable at the pass's sync)."""
        log = self.log
        if rd.snapshot is not None:
            log.apply_snapshot(rd.snapshot)
        if rd.entries:
            log.append(rd.entries)
        if rd.hard_state is not None:
            log.set_hard_state(rd.hard_state)

    def apply_ready(self, rd: Ready) -> None:
        """Step 4 of a pass: restore an installed snapshot, apply what is newly committed.
        While the state machine is :attr:`holding`, or after it held entries back, the
        committed entries stay in the log and :meth:`apply_backlog` applies them later."""
        snap = rd.snapshot
        if snap is not None and snap.index > self._applied:
            self.sm.restore(snap.data)
            self._applied = snap.index
            self._applied_term = snap.term
            self._applied_conf = (tuple(snap.peers), tuple(snap.learners))
            self._since_bytes = 0
            self._snapshot_mono_ns = time.monotonic_ns()
        ents = rd.committed_entries
        if ents and ents[0].index <= self._applied:
            ents = [e for e in ents if e.index > self._applied]
        if ents and (self._backlog or self.holding or ents[0].index != self._applied + 1):
            self._backlog = True        # read from the log once the state machine is ready
            ents = []
        if ents:
            self._apply_entries(ents)
        if rd.read_states or self._reads_confirmed:
            self._confirm_reads(rd)
        if ents or snap is not None:
            self._wake_waiters()

    def backlog_due(self) -> bool:
        """Whether :meth:`apply_backlog` has work now."""
        return self._backlog and not self.holding

    def apply_backlog(self) -> None:
        """Apply up to :data:`BACKLOG_BATCH` committed entries from the log that were held
        back while the state machine was :attr:`holding`; the host calls it again on its
        next pass until none remain."""
        if not self.backlog_due():
            return
        commit = self.node.commit_index
        if self._applied >= commit:
            self._backlog = False
            return
        hi = min(commit, self._applied + BACKLOG_BATCH, self.log.last_index())
        if hi <= self._applied or self.log.first_index() > self._applied + 1:
            # the node installed a snapshot its Ready has not brought to the log and the
            # state machine yet (the log ends before the commit, or starts after what was
            # applied): that Ready moves the applied index on; nothing to read here now
            return
        ents = self.log.entries(self._applied + 1, hi + 1)
        if ents:
            self._apply_entries(ents)
            self._wake_waiters()
            self._serve_reads()
        if self._applied >= commit:
            self._backlog = False
        else:
            self.host.touch(self)

    def _apply_entries(self, ents: list[Entry]) -> None:
        node = self.node
        term = node.term
        if node.role is Role.LEADER and self._applied_term != term and ents[-1].term == term:
            # This leader's own term starts in this batch: apply up to its first entry (the
            # empty entry of Raft §8), report the leadership, then apply the rest, so that
            # what this leader proposed is answered even when it commits in the same pass.
            k = next(i for i, e in enumerate(ents) if e.term == term) + 1
            if k < len(ents):
                self._apply_run(ents[:k])
                self.check_leader()
                if self.closed or self.failed is not None:     # by its state machine
                    return
                ents = ents[k:]
        self._apply_run(ents)

    def _apply_run(self, ents: list[Entry]) -> None:
        self.sm.apply(ents)
        if self.host.wants_event("raft_applied"):
            self._applied_event_log(ents)
        voters, learners = self._applied_conf
        n = 0
        for e in ents:
            n += len(e.data)
            if e.type == _CONFIG:
                voters, learners = apply_membership(voters, learners, e)
        self._since_bytes += n
        self._applied_conf = (voters, learners)
        self._applied = ents[-1].index
        self._applied_term = ents[-1].term

    def _wake_waiters(self) -> None:
        ev, self._applied_event = self._applied_event, None
        if ev is not None:
            ev.set()

    def _applied_event_log(self, ents: list[Entry]) -> None:
        """``raft_applied`` for one apply batch (see jetraft.events.EVENTS)."""
        crc = zlib.crc32
        tc = _TYPE_CRC
        self.host.group_event(self, "raft_applied", {
            "group": self.name, "term": self.node.term,
            "first_index": ents[0].index, "last_index": ents[-1].index,
            "terms": [e.term for e in ents],
            "hashes": [crc(e.data, tc[e.type]) for e in ents]})

    def track_replicas(self, now_ns: int) -> None:
        """On the leader, once per tick: emit ``raft_replica_current``/``raft_replica_lagging``
        for each other peer whose state changed since the last tick, and for every peer on
        the first evaluation of a term (a new leadership) or of a peer (it just joined), once
        the peer answered or went offline (a new leader's match index for a peer is 0 until
        it answers, which is not lagging). The states are those of :meth:`replicas`. On a
        follower: forget the states."""
        node = self.node
        if node.role is not Role.LEADER:
            if self._replica_term:
                self.forget_replicas()
            return
        states = self._replica_state
        term = node.term
        if term != self._replica_term:
            self._replica_term = term
            states.clear()
        last = node.last_index
        me = self.host.server_name
        others = 0
        for p in node.peers:
            if p == me:
                continue
            others += 1
            lag = self._lag(p, last, now_ns)
            offline = self._offline(p, now_ns)
            current = not offline and lag <= CURRENT_LAG
            old = states.get(p)
            if old is not None and old[0] == current:
                continue
            if old is None and not current and not offline and not self.node.match_index(p):
                continue    # a new leader knows nothing of the peer's log until it answers
            states[p] = (current, now_ns)
            fields = {"group": self.name, "term": term, "peer": p, "lag": lag, "offline": offline}
            if current:
                fields["behind_ns"] = None if old is None else now_ns - old[1]
                self.host.group_event(self, "raft_replica_current", fields)
            else:
                self.host.group_event(self, "raft_replica_lagging", fields)
        if len(states) > others:          # a peer left the configuration
            peers = node.peers
            for p in [p for p in states if p not in peers]:
                del states[p]

    def maybe_snapshot(self, now_mono_ns: int | None = None) -> None:
        """Snapshot the state machine when :attr:`policy` says one is due, and compact the
        log up to it (Raft §7); events ``raft_snapshot_taken`` and ``raft_log_compacted``.
        A state machine that declines (``snapshot()`` returns None) is asked again after
        another ``policy.entries`` entries. ``now_mono_ns``: time.monotonic_ns()."""
        log = self.log
        since = self._applied - log.snapshot().index
        if since <= 0 or self._applied < self._snapshot_retry or self.holding \
                or self._applied > log.last_index():    # adopted a snapshot past the log
            return
        policy = self.policy
        now = time.monotonic_ns() if now_mono_ns is None else now_mono_ns
        if since >= policy.entries:
            reason = "entries"
        elif self._since_bytes >= policy.bytes:
            reason = "bytes"
        elif now - self._snapshot_mono_ns >= policy.interval_ns:
            reason = "interval"
        else:
            return
        data = self.sm.snapshot()
        if data is None:        # the state machine keeps its whole log (it replays it on open)
            self._snapshot_retry = self._applied + policy.entries
            self._snapshot_mono_ns = now
            return
        snap = log.create_snapshot(self._applied, data, *self._applied_conf)
        self._since_bytes = 0
        self._snapshot_mono_ns = now
        self.host.group_event(self, "raft_snapshot_taken", {
            "group": self.name, "index": snap.index, "term": snap.term, "bytes": len(data),
            "reason": reason})
        first = log.first_index()
        log.compact(snap.index)
        after = getattr(self.sm, "snapshot_durable", None)
        if after is not None:
            after(snap.index)
        self.host.group_event(self, "raft_log_compacted", {
            "group": self.name, "index": snap.index, "entries": max(0, snap.index + 1 - first),
            "log_bytes": log.disk_bytes()})

    def snapshot_now(self, reason: str) -> int:
        """Snapshot the state machine at the applied index now, whatever :attr:`policy`
        says, and compact the log up to it (a stream restore: its peers must take the
        restored store through the snapshot, not replay the log). Returns the snapshot's
        index. Raises RuntimeError when nothing was applied since the last snapshot or the
        state machine declines (holding, or a memory stream); StorageError when the store
        or the log cannot be made durable."""
        log = self.log
        if self._applied <= log.snapshot().index or self.holding or self._applied > log.last_index():
            raise RuntimeError(f"RAFT group {self.name}: no entry applied since its last snapshot")
        data = self.sm.snapshot()
        if data is None:
            raise RuntimeError(f"RAFT group {self.name}: its state machine took no snapshot")
        snap = log.create_snapshot(self._applied, data, *self._applied_conf)
        self._since_bytes = 0
        self._snapshot_mono_ns = time.monotonic_ns()
        self.host.group_event(self, "raft_snapshot_taken", {
            "group": self.name, "index": snap.index, "term": snap.term, "bytes": len(data),
            "reason": reason})
        first = log.first_index()
        log.compact(snap.index)
        after = getattr(self.sm, "snapshot_durable", None)
        if after is not None:
            after(snap.index)
        self.host.group_event(self, "raft_log_compacted", {
            "group": self.name, "index": snap.index, "entries": max(0, snap.index + 1 - first),
            "log_bytes": log.disk_bytes()})
        return snap.index

    def check_leader(self) -> None:
        """Report a change of leader, or a new term of a known leader, to the state
        machine (after the pass applied what it could)."""
        node = self.node
        if self._reads:
            self._refuse_lost_reads()
        leader, term = node.leader, node.term
        if leader == self.host.server_name and self._applied_term != term:
            # A new leader is reported once it applied its own term's first entry (the empty
            # entry of Raft §8), so everything committed before is applied: what it answers
            # from its state is never older than what its predecessors acknowledged.
            leader = None
        last_leader, last_term = self._seen
        if leader == last_leader and (leader is None or term == last_term):
            return
        self._seen = (leader, term)
        if leader is not None:
            self.leader_changes += 1
        if leader != last_leader:
            self.leader_since_ns = None if leader is None else time.time_ns()
        self.sm.leader_changed(leader, term)

    @property
    def tracked_replicas(self) -> frozenset[str]:
        """The peers whose replica state (current or lagging) :meth:`track_replicas` keeps:
        on the leader, the other peers of the configuration it evaluated in its term; empty
        on a follower, and after :meth:`forget_replicas`."""
        return frozenset(self._replica_state)

    def forget_replicas(self) -> None:
        """Drop the replica states :meth:`track_replicas` keeps (its next call on the leader
        starts over with every peer's state)."""
        self._replica_term = 0
        self._replica_state = {}

    def forget_leader(self) -> None:
        """The group stopped on this server: if a leader was reported to the state machine,
        report none (an exception of ``leader_changed`` is ignored: the group is stopped).
        Reads waiting are refused."""
        if self._reads or self._reads_confirmed:
            self.drop_reads()
        if self._seen[0] is None:
            return
        term = self.node.term
        self._seen = (None, term)
        self.leader_since_ns = None
        try:
            self.sm.leader_changed(None, term)
        except Exception:  # noqa: BLE001 - the group is stopped already
            pass

    def resume(self, log: GroupLog, node: RaftNode) -> None:
        """Go on, no longer failed, with ``log`` reopened and a new ``node`` over it; the
        leader is reported anew once the node knows one."""
        self.log, self.node = log, node
        self.failed = self.failed_op = None
        self._seen = (None, node.term)
        self.leader_since_ns = None

    def mark_closed(self) -> None:
        """The host no longer hosts the group: requests raise, waiters in
        :meth:`wait_applied` get trio.ClosedResourceError; reads waiting are refused."""
        self.closed = True
        if self._reads or self._reads_confirmed:
            self.drop_reads()
        ev, self._applied_event = self._applied_event, None
        if ev is not None:
            ev.set()
