"""The RAFT contract: messages, log entries, durable state, Ready, configuration, storage.

Everything the pure core (:mod:`jetraft.raft.node`), the log storage
(:mod:`jetraft.raft.storage`), the driver (``jetraft.net``) and the simulator
(``tests/sim``) exchange is defined here. No I/O, no clocks, no trio, stdlib only.

Terms follow the Raft paper (Ongaro & Ousterhout, "In Search of an Understandable Consensus
Algorithm", and Ongaro's thesis): term, vote, candidate, RequestVote, AppendEntries, commit
index, pre-vote (thesis §9.6), check-quorum (thesis §6.2), leadership transfer (thesis
§3.10, TimeoutNow), single-server membership changes (thesis §4.1), snapshots and
InstallSnapshot (§7), read-index (thesis §6.4). The shape follows etcd-io/raft (raft.go,
rawnode.go): ``step``/``tick``/``propose`` in, ``ready()``/``advance()`` out.

Indexes start at 1; index 0 with term 0 is the empty log's sentinel. Times are ticks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol


class Role(enum.Enum):
    """A node's role in its group (Raft §5.1; PRE_CANDIDATE is thesis §9.6)."""

    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class MessageType(enum.IntEnum):
    """Every message a node sends or receives. Values are stable (they go on the wire)."""

    VOTE = 1                # RequestVote (Raft §5.2)
    VOTE_RESPONSE = 2
    PRE_VOTE = 3            # thesis §9.6: asks "would you vote for me?" without a term bump
    PRE_VOTE_RESPONSE = 4
    APPEND = 5              # AppendEntries with entries (Raft §5.3)
    APPEND_RESPONSE = 6
    HEARTBEAT = 7           # AppendEntries without entries; carries commit (bounded by match)
    HEARTBEAT_RESPONSE = 8
    SNAPSHOT = 9            # InstallSnapshot (Raft §7), the whole snapshot in one message
    TIMEOUT_NOW = 10        # leadership transfer: start an election now (thesis §3.10)
    PROPOSE = 11            # a follower forwards a client proposal to the leader
    READ_INDEX = 12         # a follower asks the leader for a read index (thesis §6.4)
    READ_INDEX_RESPONSE = 13
    TRANSFER_LEADER = 14    # a follower asks the leader to transfer leadership


class EntryType(enum.IntEnum):
    NORMAL = 1              # application data (may be empty: the leader's no-op of its term)
    CONFIG_CHANGE = 2       # data is an encoded ConfigChange (thesis §4.1)


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry. ``data`` is opaque to RAFT (bytes)."""

    term: int
    index: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""


class ConfigChangeType(enum.IntEnum):
    """ADD_PEER/REMOVE_PEER: a voter; ADD_LEARNER/REMOVE_LEARNER: a non-voting member that
    receives the log but counts for no quorum (thesis §4.2.1, etcd learners);
    PROMOTE_LEARNER: a learner becomes a voter. Each has one exact inverse (for undoing a
    truncated change)."""

    ADD_PEER = 1
    REMOVE_PEER = 2
    ADD_LEARNER = 3
    PROMOTE_LEARNER = 4
    REMOVE_LEARNER = 5


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """A single-server membership change (thesis §4.1), carried in a CONFIG_CHANGE entry.

    It takes effect on every node when the entry is *appended* to its log (thesis §4.1:
    "a server always uses the latest configuration in its log"), and is undone if that
    entry is truncated. Replace = add the new peer, then remove the old one.
    """

    type: ConfigChangeType
    peer: str

    def encode(self) -> bytes:
        return bytes([self.type]) + self.peer.encode()

    @classmethod
    def decode(cls, data: bytes) -> ConfigChange:
        """Raises ValueError on a malformed encoding."""
        if len(data) < 2:
            raise ValueError("config change too short")
        return cls(ConfigChangeType(data[0]), data[1:].decode())


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before a node answers (Raft Figure 2 "persistent state").

    ``commit`` is stored too (etcd does) so a restart re-applies no further than it may.
    """

    term: int = 0
    vote: str | None = None
    commit: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """State machine state up to and including ``index`` (of ``term``), with the group's
    configuration at that point: ``peers`` (voters) and ``learners``. ``data`` is opaque
    application state (bytes)."""

    index: int
    term: int
    peers: tuple[str, ...]
    data: bytes = b""
    learners: tuple[str, ...] = ()


@dataclass(slots=True)
class Message:
    """A message between two nodes of one group. ``group`` names the RAFT group so that many
    groups can share one connection; ``src``/``dst`` are peer ids (server names).

    Field meaning by type (as etcd raftpb.Message):
      APPEND: ``log_term``/``index`` = term and index of the entry before ``entries``;
        ``commit`` = leader's commit index.
      APPEND_RESPONSE: ``index`` = last index now matching (accept), or the rejected
        ``index`` with ``reject=True`` and ``reject_hint`` = the follower's last index (or a
        better hint) and ``log_term`` = the term at the hint, for fast backtracking.
      VOTE/PRE_VOTE: ``index``/``log_term`` = candidate's last log index/term; PRE_VOTE's
        ``term`` is the term the candidate *would* campaign in.
      HEARTBEAT: ``commit`` = min(leader commit, follower match); ``context`` echoes read-index.
      SNAPSHOT: ``snapshot`` set.
      READ_INDEX / READ_INDEX_RESPONSE: ``context`` identifies the request, ``index`` the
        read index in the response.
      PROPOSE: ``entries`` carry the data (term/index 0).
    """

    type: MessageType
    group: str
    src: str
    dst: str
    term: int = 0
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    context: bytes = b""


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once ``applied >= index`` (thesis §6.4)."""

    index: int
    context: bytes


@dataclass(slots=True)
class Ready:
    """What the driver must do, in this order (etcd rawnode.go Ready):

    1. persist ``snapshot`` (if any), then ``entries`` (append; an entry with an index
       already present truncates the log from there), then ``hard_state`` (if not None);
       and make them durable (fsync) when ``must_sync``;
    2. only then send ``messages`` (they may depend on 1);
    3. apply ``committed_entries`` in order (they are already durable on a quorum);
    4. serve ``read_states`` once applied reaches their index;
    5. call ``node.advance(ready)``.
    """

    hard_state: HardState | None = None
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None
    messages: list[Message] = field(default_factory=list)
    committed_entries: list[Entry] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    must_sync: bool = False


@dataclass(frozen=True, slots=True)
class Config:
    """A node's settings. Defaults suit the driver's 100 ms tick (election 1–2 s).

    ``election_ticks``: a follower that hears nothing for a random timeout in
    [election_ticks, 2*election_ticks) ticks becomes (pre-)candidate (Raft §5.2).
    ``heartbeat_ticks``: the leader's heartbeat period. ``max_entries_per_message`` and
    ``max_bytes_per_message`` bound one AppendEntries; ``max_inflight`` bounds the
    AppendEntries in flight per follower (flow control). ``seed`` seeds the node's own RNG
    for election timeouts (deterministic in the simulator). ``max_committed_bytes_per_ready``
    bounds the entry bytes one Ready hands over for application (a restarted replica
    replaying a long log does so in steps, in bounded memory). ``commit_broadcast``: when the
    leader's commit index advances, send every follower an AppendEntries carrying it at once
    (etcd raft.go ``bcastAppend`` after ``maybeCommit``); False: followers learn it from the
    next AppendEntries or heartbeat (as nats-server's appendEntry does), which halves the
    messages per commit when entries are proposed one at a time, and delays followers'
    apply by up to one heartbeat period.
    """

    id: str
    group: str
    peers: tuple[str, ...] = ()          # used only when storage holds no state yet
    election_ticks: int = 10
    heartbeat_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    max_entries_per_message: int = 1024
    max_bytes_per_message: int = 1 << 20
    max_inflight: int = 256
    seed: int | None = None
    commit_broadcast: bool = True
    max_committed_bytes_per_ready: int = 8 << 20


class Storage(Protocol):
    """The read side of a node's durable log, as the core needs it (etcd storage.go).

    The driver writes (from :class:`Ready`) and the core reads. Indexes in
    ``(snapshot.index, last_index()]`` are readable. Errors: :class:`CompactedError` for an
    index at or below the snapshot, :class:`UnavailableError` for one past the end,
    :class:`CorruptRangeError` for a range whose records failed their checksum (the node
    must not serve it; it is repaired from peers).
    """

    def initial_state(self) -> tuple[HardState, tuple[str, ...]]:
        """The stored hard state and peers (peers from the last snapshot or config entries)."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries with index in [lo, hi), at least one if any, at most ``max_bytes`` total."""
        ...

    def term(self, index: int) -> int:
        """The term of the entry at ``index`` (the snapshot's term at snapshot.index)."""
        ...

    def first_index(self) -> int:
        """snapshot.index + 1."""
        ...

    def last_index(self) -> int:
        ...

    def snapshot(self) -> Snapshot:
        """The latest snapshot (index 0, term 0, no data when none was taken)."""
        ...


class RaftError(Exception):
    """Base of the RAFT layer's errors."""


class CompactedError(RaftError):
    """The requested index was compacted into a snapshot."""


class UnavailableError(RaftError):
    """The requested index is past the end of the log."""


class CorruptRangeError(RaftError):
    """Records in this range failed their checksum; never served, repaired from peers."""

    def __init__(self, lo: int, hi: int, detail: str = "") -> None:
        super().__init__(f"corrupt log records in [{lo}, {hi}){': ' + detail if detail else ''}")
        self.lo, self.hi = lo, hi


class NotLeaderError(RaftError):
    """A proposal or admin request reached a node that cannot take it; ``leader`` may help."""

    def __init__(self, leader: str | None) -> None:
        super().__init__(f"not the leader (leader: {leader or 'unknown'})")
        self.leader = leader


class ProposalDroppedError(RaftError):
    """A proposal cannot be taken now (leadership transfer in progress, config change
    pending, no leader known)."""


#: Event hook: ``on_event(event_name, fields)``. Event names (added to jetraft.events):
#: ``raft_became_follower``/``raft_became_pre_candidate``/``raft_became_candidate``/
#: ``raft_became_leader`` {group, term, leader} (``raft_became_leader`` also ``index``: the new
#: leader's last log index, before its term's empty entry), ``raft_vote_granted`` {group, term, to},
#: ``raft_commit_advanced`` {group, term, commit}, ``raft_snapshot_taken`` {group, index, term},
#: ``raft_snapshot_installed`` {group, index, term}, ``raft_peer_added``/``raft_peer_removed``
#: {group, term, peer, index}, ``raft_leader_transfer`` {group, term, to}.
EventHook = Any
