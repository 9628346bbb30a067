"""RaftNode: jetraft's pure RAFT consensus core (the shape of etcd-io/raft raft.go +
rawnode.go, written anew).

The node is a deterministic state machine: the driver feeds it ticks (:meth:`RaftNode.tick`),
messages from peers (:meth:`RaftNode.step`) and client requests (:meth:`RaftNode.propose`,
:meth:`RaftNode.read_index`, ...), and collects its output with :meth:`RaftNode.ready` /
:meth:`RaftNode.advance`. No sockets, no clocks, no disk; the only randomness is the node's
own ``random.Random(config.seed)`` for election timeouts.

Rules implemented, with their sources:

* Elections (Raft §5.2): a randomized timeout in [election_ticks, 2*election_ticks) ticks,
  redrawn at every reset; one vote per term, persisted (Ready.hard_state) before the
  response is sent; the up-to-date check (Raft §5.4.1).
* Pre-vote (thesis §9.6): a would-be candidate first asks whether it would win, without
  changing anyone's term. Leader lease (etcd raft.go Step "inLease"): with check_quorum, a
  node that heard from a leader within the election timeout ignores (pre-)votes for a
  higher term, unless the request carries :data:`TRANSFER_CONTEXT`.
* Check-quorum (thesis §6.2): a leader that has not heard from a quorum within an election
  timeout steps down.
* Log replication (Raft §5.3) with probe/replicate/snapshot progress, an inflight window and
  batched appends; fast backtracking with the follower's reject hint (etcd
  findConflictByTerm). Commit only by counting replicas of an entry of the current term
  (Raft §5.4.2); a leader's own entries count once persisted (after advance).
* Leadership transfer (thesis §3.10): TIMEOUT_NOW; the target campaigns at once.
* Single-server membership changes (thesis §4.1): CONFIG_CHANGE entries take effect when
  appended, are undone on truncation, one at a time; a removed leader steps down once its
  removal is committed (thesis §4.2.2). Learners (thesis §4.2.1 "catching up new servers",
  etcd learners): members that receive the log and count for no quorum, never campaign
  and are never asked for votes, until promoted to voters.
* Snapshots (Raft §7): compacted entries are replaced by an InstallSnapshot.
* Read index (thesis §6.4): a heartbeat round confirms leadership before answering.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .log import RaftLog
from .memory import apply_membership as _apply_membership
from .progress import REPLICATE, SNAPSHOT, Progress
from .read_only import ReadOnly, ReadRequest
from .replication import Replication
from .types import (
    CompactedError,
    Config,
    ConfigChange,
    ConfigChangeType,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    NotLeaderError,
    ProposalDroppedError,
    ReadState,
    Ready,
    Role,
    Storage,
    UnavailableError,
)

#: ``Message.context`` of a VOTE sent by a leadership-transfer target: voters grant it even
#: within the leader lease (etcd campaignTransfer).
TRANSFER_CONTEXT = b"jetraft:transfer"

_VOTE = MessageType.VOTE
_VOTE_RESP = MessageType.VOTE_RESPONSE
_PRE_VOTE = MessageType.PRE_VOTE
_PRE_VOTE_RESP = MessageType.PRE_VOTE_RESPONSE
_APPEND = MessageType.APPEND
_APPEND_RESP = MessageType.APPEND_RESPONSE
_HEARTBEAT = MessageType.HEARTBEAT
_HEARTBEAT_RESP = MessageType.HEARTBEAT_RESPONSE
_SNAPSHOT = MessageType.SNAPSHOT
_TIMEOUT_NOW = MessageType.TIMEOUT_NOW
_PROPOSE = MessageType.PROPOSE
_READ_INDEX = MessageType.READ_INDEX
_READ_INDEX_RESP = MessageType.READ_INDEX_RESPONSE
_TRANSFER = MessageType.TRANSFER_LEADER
_FORWARDED = (_PROPOSE, _READ_INDEX, _TRANSFER)
_FROM_LEADER = (_APPEND, _HEARTBEAT, _SNAPSHOT)
_CONFIG = EntryType.CONFIG_CHANGE
_NORMAL = EntryType.NORMAL


class RaftNode(Replication):
    """One member of one RAFT group. See the module docstring for the rules.

    ``config`` holds the node's id, group and timing (ticks); ``storage`` is the durable
    state the driver maintains from :class:`Ready` (read-only for the node). On start the
    node restores term, vote and commit from ``storage.initial_state()``, and the peers
    from it too (``config.peers`` only when the storage has none); ``initial_state`` peers
    are taken to be the latest configuration in the stored log (uncommitted CONFIG_CHANGE
    entries included) so that a truncation can still undo them. The applied index starts
    at the storage's snapshot index: committed entries after it are handed out again.

    A node joining an existing group starts with ``config.peers`` = the group's current
    configuration without itself: it answers the leader but cannot campaign until the
    ADD_PEER entry naming it reaches its log. A node with no peers at all learns them only
    from a snapshot (the bootstrap configuration is not in the log).

    ``on_event(name, fields)`` receives the RAFT events named in :mod:`.types`.
    ``can_lead()``: the application's say on whether this node may campaign now (False while
    its state machine lacks data the log no longer holds, e.g. a replica fetching a
    snapshot's messages); None: always. ``can_vote()``: the application's say on whether
    this node may grant (pre-)votes now (False for a server that lost its store and has not
    been admitted again: its log no longer holds what it once acknowledged, so its vote
    could elect a leader missing committed entries); None: always.
    """

    __slots__ = (
        "_cfg",
        "_id",
        "_group",
        "_storage",
        "_on_event",
        "_rng",
        "_log",
        "_term",
        "_vote",
        "_role",
        "_leader",
        "_peers",
        "_learners",
        "_conf_hist",
        "_prs",
        "_votes",
        "_election_elapsed",
        "_heartbeat_elapsed",
        "_timeout",
        "_transferee",
        "_pending_conf_index",
        "_msgs",
        "_read_states",
        "_read_only",
        "_prev_hs",
        "_bcast",
        "_bcast_empty",
        "_forward",
        "_can_lead",
        "_can_vote",
    )

    def __init__(
        self,
        config: Config,
        storage: Storage,
        *,
        on_event: Callable[[str, dict], None] | None = None,
        can_lead: Callable[[], bool] | None = None,
        can_vote: Callable[[], bool] | None = None,
    ) -> None:
        if config.election_ticks <= config.heartbeat_ticks or config.heartbeat_ticks < 1:
            raise ValueError("need 1 <= heartbeat_ticks < election_ticks")
        self._cfg = config
        self._id = config.id
        self._group = config.group
        self._storage = storage
        self._on_event = on_event
        self._can_lead = can_lead
        self._can_vote = can_vote
        self._rng = random.Random(config.seed)
        hs, stored_peers = storage.initial_state()
        log = self._log = RaftLog(storage)
        log.committed = min(max(hs.commit, log.committed), log.last_index())
        self._term = hs.term
        self._vote = hs.vote
        self._prev_hs = hs
        self._role = Role.FOLLOWER
        self._leader: str | None = None
        self._prs: dict[str, Progress] = {}
        self._votes: dict[str, bool] = {}
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = 0
        self._transferee: str | None = None
        self._pending_conf_index = 0
        self._msgs: list[Message] = []
        self._read_states: list[ReadState] = []
        self._read_only = ReadOnly()
        self._bcast = False
        self._bcast_empty = False
        self._forward: list[Entry] = []
        initial_learners = getattr(storage, "initial_learners", None)
        stored_learners = tuple(initial_learners()) if initial_learners is not None else ()
        if stored_peers or stored_learners:
            self._init_config(tuple(stored_peers), stored_learners)
        else:
            self._init_config(tuple(config.peers), ())
        self._reset_timeout()

    def _init_config(self, latest: tuple[str, ...], learners: tuple[str, ...]) -> None:
        """Rebuild the configuration history over the uncommitted tail of the log, by
        undoing its CONFIG_CHANGE entries backwards from the latest configuration (voters
        ``latest``, ``learners``)."""
        log = self._log
        tail: list[Entry] = []
        if log.committed < log.last_index():
            tail = [
                e
                for e in log.slice(log.committed + 1, log.last_index() + 1)
                if e.type == _CONFIG
            ]
        peers, lrn = latest, learners
        later: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = []
        for e in reversed(tail):
            later.append((e.index, peers, lrn))
            peers, lrn = _apply_membership(peers, lrn, e, undo=True)
        self._conf_hist = [(log.committed, peers, lrn), *reversed(later)]
        self._peers = latest
        self._learners = learners

    # -- properties ----------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._id

    @property
    def group(self) -> str:
        return self._group

    @property
    def term(self) -> int:
        return self._term

    @property
    def role(self) -> Role:
        return self._role

    @property
    def leader(self) -> str | None:
        return self._leader

    @property
    def vote(self) -> str | None:
        return self._vote

    @property
    def commit_index(self) -> int:
        return self._log.committed

    @property
    def applied_index(self) -> int:
        return self._log.applied

    @property
    def last_index(self) -> int:
        return self._log.last_index()

    @property
    def peers(self) -> tuple[str, ...]:
        """The voters of the latest configuration in the log (thesis §4.1), committed or
        not."""
        return self._peers

    @property
    def commit_current(self) -> bool:
        """The commit index this node knows is the group's: it covers an entry of the
        current term, which no leader commits before every entry committed in an earlier
        term (Raft §5.4.2, §8: a new leader commits an entry of its own term first). Until
        then the commit index may lag what earlier leaders committed (a commit index is
        learned, not stored with every entry)."""
        committed = self._log.committed
        if committed == 0:
            return False
        try:
            return self._log.term(committed) == self._term
        except (CompactedError, UnavailableError):     # not in the log: an older term's
            return False

    @property
    def config_pending(self) -> bool:
        """On the leader: a configuration change is appended but not committed yet."""
        return self._role is Role.LEADER and self._pending_conf_index > self._log.committed

    @property
    def learners(self) -> tuple[str, ...]:
        """The learners of the latest configuration in the log: members that receive the
        log but neither vote nor count for a quorum (thesis §4.2.1)."""
        return self._learners

    def _quorum(self) -> int:
        return len(self._peers) // 2 + 1

    def _promotable(self) -> bool:
        """May this node campaign? It must be in the configuration, and its log must not
        be missing committed entries lost to corruption (see :meth:`_lost_commit_guard`):
        such a node and a lagging peer could form a majority without those entries. The
        application may hold it back too (``can_lead``), and a node that may not vote
        (``can_vote``) does not vote for itself either."""
        return (self._id in self._peers and self._log.last_index() >= self._commit_watermark()
                and (self._can_lead is None or self._can_lead())
                and (self._can_vote is None or self._can_vote()))

    def _commit_watermark(self) -> int:
        watermark = getattr(self._storage, "commit_watermark", None)
        return watermark() if watermark is not None else 0

    # -- events and sending --------------------------------------------------------------

    def _emit(self, name: str, **fields: object) -> None:
        if self._on_event is not None:
            self._on_event(name, {"group": self._group, **fields})

    def _send(self, mtype: MessageType, to: str, **kw: object) -> None:
        kw.setdefault("term", self._term)
        self._msgs.append(Message(mtype, self._group, self._id, to, **kw))  # type: ignore[arg-type]

    # -- role transitions (etcd raft.go becomeFollower/...; Raft §5.2) ----------------------

    def _reset_timeout(self) -> None:
        n = self._cfg.election_ticks
        self._timeout = self._rng.randrange(n, 2 * n)

    def _reset(self, term: int) -> None:
        if term != self._term:
            self._term = term
            self._vote = None
        self._leader = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._reset_timeout()
        self._transferee = None
        self._votes = {}
        self._prs = {}
        self._read_only.reset()
        self._bcast = self._bcast_empty = False
        self._pending_conf_index = 0

    def _become_follower(self, term: int, leader: str | None) -> None:
        self._reset(term)
        self._leader = leader
        self._role = Role.FOLLOWER
        self._emit("raft_became_follower", term=term, leader=leader)

    def _become_pre_candidate(self) -> None:
        """thesis §9.6: no term change, no vote change; only the role and the lost leader."""
        self._role = Role.PRE_CANDIDATE
        self._votes = {}
        self._leader = None
        self._emit("raft_became_pre_candidate", term=self._term, leader=None)

    def _become_candidate(self) -> None:
        self._reset(self._term + 1)
        self._vote = self._id
        self._role = Role.CANDIDATE
        self._emit("raft_became_candidate", term=self._term, leader=None)

    def _become_leader(self) -> None:
        """Raft §5.2 won; §8: append an empty entry of the new term at once."""
        self._reset(self._term)
        self._role = Role.LEADER
        self._leader = self._id
        log = self._log
        last = log.last_index()
        inflight = self._cfg.max_inflight
        for p in self._peers + self._learners:
            if p != self._id:
                self._prs[p] = Progress(last + 1, inflight)
        # etcd: no config change until everything before this term is committed.
        self._pending_conf_index = last
        self._emit("raft_became_leader", term=self._term, leader=self._id, index=last)
        self._append_as_leader([Entry(self._term, last + 1)])

    # -- ticks ---------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance logical time by one tick (the driver's clock; units: ticks)."""
        if self._role is Role.LEADER:
            self._tick_leader()
            return
        self._election_elapsed += 1
        if self._election_elapsed >= self._timeout and self._promotable():
            self._election_elapsed = 0
            self._campaign(self._cfg.pre_vote)

    def _tick_leader(self) -> None:
        """Heartbeats every heartbeat_ticks; every election_ticks: check-quorum (thesis
        §6.2), abandon a transfer that did not finish (thesis §3.10), retry stale snapshots."""
        cfg = self._cfg
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= cfg.election_ticks:
            self._election_elapsed = 0
            if cfg.check_quorum and not self._quorum_active():
                self._become_follower(self._term, None)
                return
            for pr in self._prs.values():
                if pr.state == SNAPSHOT:
                    if pr.snapshot_stale:
                        pr.become_probe()
                    else:
                        pr.snapshot_stale = True
            self._transferee = None
        if self._heartbeat_elapsed >= cfg.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._bcast_heartbeat()

    def _quorum_active(self) -> bool:
        """Whether a quorum (self included if a member) was heard from since the last
        check; clears the marks for the next round (etcd QuorumActive)."""
        active = 0
        for p in self._peers:
            if p == self._id:
                active += 1
            else:
                pr = self._prs.get(p)
                if pr is not None and pr.recent_active:
                    active += 1
        for pr in self._prs.values():
            pr.recent_active = False
        return active >= self._quorum()

    # -- elections (Raft §5.2, thesis §9.6) ----------------------------------------------

    def campaign(self) -> None:
        """Start an election now: pre-vote first when ``config.pre_vote`` (thesis §9.6).
        Does nothing on a leader or on a node outside the configuration."""
        if self._role is not Role.LEADER:
            self._campaign(self._cfg.pre_vote)

    def _campaign(self, pre_vote: bool, transfer: bool = False) -> None:
        if not self._promotable():
            return
        if pre_vote:
            self._become_pre_candidate()
            mtype, term = _PRE_VOTE, self._term + 1
        else:
            self._become_candidate()
            mtype, term = _VOTE, self._term
        self._votes = {self._id: True}
        if self._quorum() <= 1:
            self._won()
            return
        log = self._log
        last = log.last_index()
        last_term = log.term(last)
        ctx = TRANSFER_CONTEXT if transfer else b""
        for p in self._peers:
            if p != self._id:
                self._send(mtype, p, term=term, index=last, log_term=last_term, context=ctx)

    def _won(self) -> None:
        if self._role is Role.PRE_CANDIDATE:
            self._campaign(False)
        else:
            self._become_leader()

    def _vote_counts(self, msg: Message) -> bool:
        """Whether a VOTE_RESPONSE / PRE_VOTE_RESPONSE belongs to the current campaign:
        a vote answers our current term (Raft §5.2); a granted pre-vote answers the term we
        would campaign in, a refused one carries the voter's term, equal to ours (thesis
        §9.6). Anything else is a stale answer to an earlier campaign."""
        if msg.type == _VOTE_RESP:
            return msg.term == self._term
        if msg.reject:
            return msg.term == self._term
        return msg.term == self._term + 1

    def _poll(self, msg: Message) -> None:
        if not self._vote_counts(msg) or msg.src not in self._peers:
            return
        self._votes[msg.src] = not msg.reject
        granted = sum(1 for p, v in self._votes.items() if v and p in self._peers)
        rejected = sum(1 for p, v in self._votes.items() if not v and p in self._peers)
        q = self._quorum()
        if granted >= q:
            self._won()
        elif rejected >= len(self._peers) - q + 1:
            self._become_follower(self._term, None)

    def _lost_commit_guard(self, msg: Message) -> bool:
        """True when the vote must be refused because this node's log lost committed entries.

        A log whose corrupt range was cut off on open reports ``commit_watermark()``: the
        commit index it once recorded. Entries up to it were committed, so a candidate whose
        log ends before it cannot hold them all, and electing it would overwrite them (Raft
        §5.4 leader completeness; the corruption hazard of nats-server #7549). Storage
        without the method (MemoryStorage) never lost anything.
        """
        return msg.index < self._commit_watermark()

    def _handle_vote_request(self, msg: Message) -> None:
        """RequestVote / pre-vote (Raft §5.2, §5.4.1; thesis §9.6). A vote is recorded in
        the hard state that the same Ready carries with the response."""
        pre = msg.type == _PRE_VOTE
        rtype = _PRE_VOTE_RESP if pre else _VOTE_RESP
        can_vote = (
            self._vote == msg.src
            or (self._vote is None and self._leader is None)
            or (pre and msg.term > self._term)
        )
        if self._can_vote is not None and not self._can_vote():
            can_vote = False
        if can_vote and self._log.is_up_to_date(msg.index, msg.log_term) and not self._lost_commit_guard(msg):
            self._send(rtype, msg.src, term=msg.term)
            if not pre:
                self._election_elapsed = 0
                self._vote = msg.src
                self._emit("raft_vote_granted", term=self._term, to=msg.src)
        else:
            self._send(rtype, msg.src, term=self._term, reject=True)

    # -- step ----------------------------------------------------------------------------

    def step(self, msg: Message) -> None:
        """Process one message from a peer. Never raises for a message of another group or
        destination, from ourselves, stale (Raft §5.1: lower term) or otherwise
        unexpected: such messages are ignored (a stale append is answered with our term so
        an old leader steps down, etcd raft.go Step)."""
        if msg.group != self._group or msg.dst != self._id or msg.src == self._id:
            return
        t = msg.type
        if t in _FORWARDED:
            pass  # forwarded client requests carry no term (etcd MsgProp/MsgReadIndex)
        elif msg.term > self._term:
            if t == _VOTE or t == _PRE_VOTE:
                in_lease = (
                    self._cfg.check_quorum
                    and self._leader is not None
                    and self._election_elapsed < self._cfg.election_ticks
                )
                if in_lease and msg.context != TRANSFER_CONTEXT:
                    return  # leader lease: a rejoining node cannot disrupt (etcd inLease)
            if t == _PRE_VOTE or (t == _PRE_VOTE_RESP and not msg.reject):
                pass  # a pre-vote changes no term (thesis §9.6)
            elif t in _FROM_LEADER:
                self._become_follower(msg.term, msg.src)
            else:
                self._become_follower(msg.term, None)
        elif msg.term < self._term:
            if t == _APPEND or t == _HEARTBEAT:
                if self._cfg.check_quorum or self._cfg.pre_vote:
                    self._send(_APPEND_RESP, msg.src)
                return
            if t == _PRE_VOTE:
                self._send(_PRE_VOTE_RESP, msg.src, reject=True)
                return
            if t != _VOTE_RESP and t != _PRE_VOTE_RESP:
                return
            # stale vote answers go on to _vote_counts, which must refuse them
        if t == _VOTE or t == _PRE_VOTE:
            self._handle_vote_request(msg)
            return
        role = self._role
        if role is Role.LEADER:
            self._step_leader(msg)
        elif role is Role.FOLLOWER:
            self._step_follower(msg)
        else:
            self._step_candidate(msg)

    def _step_follower(self, msg: Message) -> None:
        t = msg.type
        if t in _FROM_LEADER:
            self._election_elapsed = 0
            self._leader = msg.src
            if t == _APPEND:
                self._handle_append(msg)
            elif t == _HEARTBEAT:
                self._handle_heartbeat(msg)
            else:
                self._handle_snapshot(msg)
        elif t == _TIMEOUT_NOW:
            # thesis §3.10: campaign at once, skipping pre-vote, past the voters' lease.
            self._emit("raft_leader_transfer", term=self._term, to=self._id)
            self._campaign(False, transfer=True)
        elif t == _READ_INDEX_RESP:
            self._read_states.append(ReadState(msg.index, msg.context))

    def _step_candidate(self, msg: Message) -> None:
        t = msg.type
        if t in _FROM_LEADER:
            self._become_follower(self._term, msg.src)
            self._step_follower(msg)
        elif (t == _VOTE_RESP and self._role is Role.CANDIDATE) or (
            t == _PRE_VOTE_RESP and self._role is Role.PRE_CANDIDATE
        ):
            self._poll(msg)

    def _step_leader(self, msg: Message) -> None:
        t = msg.type
        if t == _APPEND_RESP:
            pr = self._prs.get(msg.src)
            if pr is not None:
                pr.recent_active = True
                self._handle_append_response(msg, pr)
        elif t == _HEARTBEAT_RESP:
            pr = self._prs.get(msg.src)
            if pr is not None:
                self._handle_heartbeat_response(msg, pr)
        elif t == _PROPOSE:
            if self._transferee is None and msg.src in self._prs:
                self._append_as_leader(
                    [
                        Entry(self._term, self._log.last_index() + 1 + i, _NORMAL, e.data)
                        for i, e in enumerate(msg.entries)
                        if e.type == _NORMAL
                    ]
                )
        elif t == _READ_INDEX:
            if msg.src in self._prs:
                self._leader_read(msg.context, msg.src)
        elif t == _TRANSFER:
            target = msg.context.decode(errors="replace") if msg.context else msg.src
            if target in self._prs:
                self._start_transfer(target)

    # -- proposals -----------------------------------------------------------------------

    def propose(self, data: bytes) -> None:
        """Propose ``data`` as a NORMAL entry. A leader appends it; a follower forwards it
        to the known leader (batched, sent at the next Ready). Raises ProposalDroppedError
        when no leader is known or a leadership transfer is in progress."""
        if self._role is Role.LEADER:
            if self._transferee is not None:
                raise ProposalDroppedError("leadership transfer in progress")
            log = self._log
            log.append_one(Entry(self._term, log.last_index() + 1, _NORMAL, data))
            self._bcast = True
            return
        if self._leader is None:
            raise ProposalDroppedError("no leader known")
        self._forward.append(Entry(0, 0, _NORMAL, data))

    def propose_config_change(self, change: ConfigChange) -> None:
        """Propose a single-server membership change (thesis §4.1). Leader only
        (NotLeaderError otherwise). ValueError when adding a known member (voter or
        learner), removing an unknown one or the last voter, promoting a non-learner;
        ProposalDroppedError while an earlier change is not committed or a transfer is in
        progress."""
        if self._role is not Role.LEADER:
            raise NotLeaderError(self._leader)
        peers, learners = self._peers, self._learners
        kind, peer = change.type, change.peer
        if kind in (ConfigChangeType.ADD_PEER, ConfigChangeType.ADD_LEARNER):
            if peer in peers or peer in learners:
                raise ValueError(f"peer {peer!r} already in the group"
                                 + (" as a learner" if peer in learners else ""))
        elif kind in (ConfigChangeType.PROMOTE_LEARNER, ConfigChangeType.REMOVE_LEARNER):
            if peer not in learners:
                raise ValueError(f"peer {peer!r} is not a learner of the group")
        elif peer not in peers:
            raise ValueError(f"peer {peer!r} not in the group")
        elif len(peers) == 1:
            raise ValueError("cannot remove the last peer")
        if self._pending_conf_index > self._log.committed:
            raise ProposalDroppedError("a configuration change is still uncommitted")
        if self._transferee is not None:
            raise ProposalDroppedError("leadership transfer in progress")
        index = self._log.last_index() + 1
        self._pending_conf_index = index
        self._append_as_leader([Entry(self._term, index, _CONFIG, change.encode())])

    # -- leadership transfer (thesis §3.10) ----------------------------------------------

    def transfer_leadership(self, to: str) -> None:
        """Hand leadership to ``to``. On the leader: stop taking proposals, bring ``to`` up
        to date, then send TIMEOUT_NOW; abandoned after an election timeout. On a follower:
        forward the request to the leader. ValueError for a peer outside the group;
        ProposalDroppedError when no leader is known."""
        if to not in self._peers:
            raise ValueError(f"peer {to!r} not in the group")
        if self._role is Role.LEADER:
            if to != self._id:
                self._start_transfer(to)
        elif self._leader is not None:
            self._send(_TRANSFER, self._leader, term=0, context=to.encode())
        else:
            raise ProposalDroppedError("no leader known")

    def _start_transfer(self, to: str) -> None:
        if self._transferee == to:
            return
        self._transferee = to
        self._election_elapsed = 0  # the transfer must finish within one election timeout
        self._emit("raft_leader_transfer", term=self._term, to=to)
        pr = self._prs[to]
        if pr.match == self._log.last_index():
            self._send(_TIMEOUT_NOW, to)
        else:
            self._send_append(to, pr)

    # -- read index (thesis §6.4) --------------------------------------------------------

    def read_index(self, context: bytes) -> None:
        """Request a linearizable read identified by ``context`` (unique per request). A
        ReadState(index, context) appears in a later Ready once leadership is confirmed by
        a heartbeat round; serve the read once applied >= index. A new leader answers only
        after committing an entry of its term. A follower asks the leader.
        ProposalDroppedError when no leader is known."""
        if self._role is Role.LEADER:
            self._leader_read(context, self._id)
        elif self._leader is not None:
            self._send(_READ_INDEX, self._leader, term=0, context=context)
        else:
            raise ProposalDroppedError("no leader known")

    def _leader_read(self, ctx: bytes, src: str) -> None:
        if not self.commit_current:
            self._read_only.waiting.append((ctx, src))
            return
        if ctx in self._read_only.pending:
            return
        req = ReadRequest(self._log.committed, ctx, src, {self._id})
        if self._read_quorum(req):
            self._answer_read(req)
            return
        self._read_only.add(req)
        commit = self._log.committed
        for p, pr in self._prs.items():
            self._send(_HEARTBEAT, p, commit=min(pr.match, commit), context=ctx)

    def _read_quorum(self, req: ReadRequest) -> bool:
        return sum(1 for p in req.acks if p in self._peers) >= self._quorum()

    def _read_ack(self, ctx: bytes, src: str) -> None:
        # Confirming a request confirms every earlier one (etcd read_only.go advance).
        for r in self._read_only.ack(ctx, src, self._read_quorum):
            self._answer_read(r)

    def _answer_read(self, req: ReadRequest) -> None:
        if req.src == self._id:
            self._read_states.append(ReadState(req.index, req.context))
        else:
            self._send(_READ_INDEX_RESP, req.src, index=req.index, context=req.context)

    # -- Ready / advance (etcd rawnode.go) -----------------------------------------------

    def has_ready(self) -> bool:
        """Whether :meth:`ready` has anything for the driver."""
        self._flush()
        log = self._log
        hs = self._prev_hs
        return bool(
            self._msgs
            or log.has_unstable()
            or log.has_next_committed()
            or self._read_states
            or log.has_pending_snapshot()
            or hs.term != self._term
            or hs.vote != self._vote
            or hs.commit != log.committed
        )

    def ready(self) -> Ready:
        """Everything the driver must do now, in :class:`Ready`'s order: persist (snapshot,
        entries, hard state), then send, then apply. Messages that depend on the state in
        this Ready (a vote, an append response) are in the same Ready, so persisting first
        keeps them truthful. Each item is handed out once; call :meth:`advance` after."""
        self._flush()
        log = self._log
        rd = Ready()
        rd.snapshot = log.take_snapshot()
        rd.entries = log.take_unstable()
        prev = self._prev_hs
        if prev.term != self._term or prev.vote != self._vote or prev.commit != log.committed:
            hs = HardState(self._term, self._vote, log.committed)
            rd.must_sync = prev.term != hs.term or prev.vote != hs.vote
            rd.hard_state = self._prev_hs = hs
        rd.must_sync = rd.must_sync or bool(rd.entries) or rd.snapshot is not None
        rd.messages, self._msgs = self._msgs, []
        rd.committed_entries = log.take_committed(self._cfg.max_committed_bytes_per_ready)
        rd.read_states, self._read_states = self._read_states, []
        return rd

    def advance(self, ready: Ready) -> None:
        """The driver persisted, sent and applied what ``ready`` held. Persisted entries now
        count toward a leader's own match (and may commit)."""
        log = self._log
        if ready.snapshot is not None:
            log.stable_snap_to(ready.snapshot.index)
            log.applied_to(ready.snapshot.index)
        if ready.entries:
            e = ready.entries[-1]
            log.stable_to(e.index, e.term)
            if self._role is Role.LEADER:
                self._maybe_commit()
        if ready.committed_entries:
            log.applied_to(ready.committed_entries[-1].index)

    def match_index(self, peer: str) -> int | None:
        """On the leader, the highest log index known replicated on ``peer`` (another member;
        Raft Figure 2 matchIndex); None on a follower or for a server it does not track.
        The cheap form of ``progress()[peer]["match"]``."""
        pr = self._prs.get(peer) if self._role is Role.LEADER else None
        return None if pr is None else pr.match

    def progress(self) -> dict[str, dict]:
        """On the leader, per peer of the configuration: {"match", "next", "state"
        ("probe"|"replicate"|"snapshot"), "recent_active", "inflight"}; {} otherwise."""
        if self._role is not Role.LEADER:
            return {}
        out: dict[str, dict] = {}
        for p in self._peers + self._learners:
            if p == self._id:
                out[p] = {
                    "match": self._self_match(),
                    "next": self._log.last_index() + 1,
                    "state": REPLICATE,
                    "recent_active": True,
                    "inflight": 0,
                }
            elif p in self._prs:
                out[p] = self._prs[p].as_dict()
        return out

