"""One replica of a clustered stream: the state machine its RAFT group replicates.

jetraft replicates a stream's *inputs*, not its effects: the leader turns each input
(a publish, a mutating API request, an ack, a flow-control reply, the firing of a timer)
into one log entry stamped with the leader's time, and every replica applies the committed
entries in log order to its own :class:`~jetraft.jetstream.api.JetStreamAccount`. The
single-server code path is deterministic given its inputs and ``now_ns``, so every replica
reaches the same messages, sequences, dedupe window, consumer state (delivered, pending,
redelivery counts, waiting pull requests) and ack floors; after a leader change the new
leader holds exactly the state its predecessor had, and redelivers what was pending when
its ack wait expires (nats-server replicates consumer state through consumer groups for the
same reason, server/jetstream_cluster.go applyConsumerEntries).

Only the leader sends what applying produces (PubAcks, API responses, deliveries), and only
for entries of its own term: every entry was on a quorum of disks (fsynced) before it was
committed and applied, so an acknowledgement is never sent for a message a majority could
lose; and a new leader replaying its predecessors' entries (after a restart of the whole
group, say) does not send their deliveries again. What a former leader did not send is
not lost: its PubAck's publisher retries (``Nats-Msg-Id`` dedupes), and its deliveries are
pending in the consumer state, redelivered after ``ack_wait``.

Entries (msgpack arrays, see :func:`encode_entry`)::

    ["P", ts, interest, subject, reply, headers, data]     a publish on a stream subject
    ["A", ts, interest, subject, reply, headers, payload]  a $JS.API request that changes state
    ["K", ts, interest, subject, reply, payload]           an ack ($JS.ACK...)
    ["F", ts, interest, subject(, last)]                   a flow-control reply ($JS.FC...);
                                                           last: [stream seq, consumer seq]
                                                           it reports (an ack_policy
                                                           flow_control ack) or nil
    ["T", ts, interest, interest_changed]                  the leader's timers fired
    ["S", ts, interest, iname, msgs, next_seq, pending, ident]
                                                           what a mirror's or source's link
                                                           fetched (jetstream/sourcing.py)
    ["L", ts, interest, consumer, ack_seq, seqs]           a durable link's acks (every message
                                                           up to ack_seq) and deliveries
                                                           (seqs) on its consumer of this
                                                           stream (jetstream/sourcing.py LinkStep)
    ["B", ts, interest, batch, reply, msgs]                a committed atomic batch (jetstream/
                                                           batch.py): msgs [[subject, headers,
                                                           data], ...], stored whole or not at all

``ts``: the leader's clock in ns since the epoch, strictly increasing along the log
(:meth:`StreamReplica.next_ts`); ``interest``: the deliver subjects of the stream's push
consumers that had subscribers when the leader proposed the entry, so that every replica
takes the same push-delivery decisions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from jetraft.raft.types import Entry, EntryType

from .api import JetStreamAccount, Reply
from .admission import MAX_TS, subject_problem
from .batch import MAX_BATCH_SIZE
from .catchup import StreamSnapshot, StreamSnapshotError
from .sourcing import LINK_REPLY, FetchAnswer, LinkStep
from .store import FileStore

PUBLISH, API, ACK, FLOW_CONTROL, TICK, SOURCED, LINK, BATCH = "P", "A", "K", "F", "T", "S", "L", "B"

_ARITY = {PUBLISH: 7, API: 7, ACK: 6, FLOW_CONTROL: 4, TICK: 4, SOURCED: 8, LINK: 6, BATCH: 6}
#: The most deliveries one "L" entry carries (a fetch answers at most FETCH_MAX_MSGS).
_LINK_SEQS_MAX = 4096


class EntryError(ValueError):
    """A stream log entry that cannot be decoded (it is skipped and reported)."""


def encode_entry(kind: str, ts: int, interest: set[str] | frozenset[str], *fields: Any) -> bytes:
    """One stream log entry (see the module docstring for each kind's fields)."""
    return msgpack.packb([kind, ts, sorted(interest), *fields], use_bin_type=True)


def decode_entry(data: bytes) -> list[Any]:
    """Decode and check one entry; raises :class:`EntryError` when it is malformed."""
    try:
        item = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several types
        raise EntryError(f"undecodable stream entry: {exc}") from None
    if not isinstance(item, list) or len(item) < 3 or item[0] not in _ARITY:
        raise EntryError("stream entry is not [kind, ts, interest, ...]")
    if item[0] == FLOW_CONTROL and len(item) == _ARITY[FLOW_CONTROL] + 1:
        last = item.pop()       # the optional last field (entries before it have none)
        if last is not None and not (isinstance(last, list) and len(last) == 2
                                     and all(isinstance(n, int) and n >= 0 for n in last)):
            raise EntryError("stream entry 'F': last must be [stream seq, consumer seq] or nil")
        item.append(tuple(last) if last is not None else None)
    elif len(item) != _ARITY[item[0]]:
        raise EntryError(f"stream entry {item[0]!r} has {len(item)} fields, wants {_ARITY[item[0]]}")
    kind, ts, interest = item[0], item[1], item[2]
    if not isinstance(ts, int) or ts < 0 or not isinstance(interest, list) \
            or not all(isinstance(s, str) for s in interest):
        raise EntryError("stream entry has a bad timestamp or interest list")
    strings = {PUBLISH: (3,), API: (3,), ACK: (3,), FLOW_CONTROL: (3,), TICK: (), SOURCED: (3,),
               LINK: (3,), BATCH: (3,)}[kind]
    for i in strings:
        if not isinstance(item[i], str) or not item[i]:
            raise EntryError(f"stream entry {kind!r}: field {i} must be a subject")
    if kind == BATCH:
        _check_batch_entry(item)
    if kind in (PUBLISH, API, ACK, BATCH) and item[4] is not None and not isinstance(item[4], str):
        raise EntryError(f"stream entry {kind!r}: reply must be a string or nil")
    if kind in (PUBLISH, API) and (item[5] is not None and not isinstance(item[5], bytes)
                                   or not isinstance(item[6], bytes)):
        raise EntryError(f"stream entry {kind!r}: headers/data must be bytes")
    if kind == PUBLISH:     # the checks of a publish's subject (jetstream/admission.py)
        problem = subject_problem(item[3])
        if problem is None and item[4]:
            problem = subject_problem(item[4])
        if problem is not None or ts > MAX_TS:
            raise EntryError(f"stream entry 'P': subject or reply {problem}" if problem
                             else f"stream entry 'P': timestamp {ts} is out of range")
    if kind == LINK and not (isinstance(item[4], int) and item[4] >= 0 and isinstance(item[5], list)
                             and len(item[5]) <= _LINK_SEQS_MAX
                             and all(isinstance(n, int) and n > 0 for n in item[5])):
        raise EntryError("stream entry 'L': ack_seq must be a sequence and seqs a list of them")
    if kind == ACK and not isinstance(item[5], bytes):
        raise EntryError("stream entry 'K': payload must be bytes")
    if kind == TICK and not isinstance(item[3], bool):
        raise EntryError("stream entry 'T': interest_changed must be a bool")
    if kind == SOURCED:
        try:
            item[4] = FetchAnswer.from_wire([item[4], item[5], item[6], None, item[7]])
        except ValueError as exc:
            raise EntryError(f"stream entry 'S': {exc}") from None
    return item


def _check_batch_entry(item: list[Any]) -> None:
    """A "B" entry's fields: a batch id, a reply (a subject or nil), and 1 to
    MAX_BATCH_SIZE messages ``[subject, headers or nil, data]`` (as lists: tuples after)."""
    reply, msgs = item[4], item[5]
    problem = subject_problem(reply) if isinstance(reply, str) and reply else None
    if problem is not None or item[1] > MAX_TS:
        raise EntryError(f"stream entry 'B': reply {problem}" if problem
                         else f"stream entry 'B': timestamp {item[1]} is out of range")
    if not isinstance(msgs, list) or not 0 < len(msgs) <= MAX_BATCH_SIZE:
        raise EntryError("stream entry 'B': msgs must be a list of 1 to 1000 messages")
    for i, m in enumerate(msgs):
        if not (isinstance(m, list) and len(m) == 3 and isinstance(m[0], str)
                and (m[1] is None or isinstance(m[1], bytes)) and isinstance(m[2], bytes)):
            raise EntryError(f"stream entry 'B': message {i + 1} is not [subject, headers, data]")
        problem = subject_problem(m[0])
        if problem is not None:
            raise EntryError(f"stream entry 'B': message {i + 1}'s subject {problem}")
        msgs[i] = (m[0], m[1], m[2])


class StoreDamaged(Exception):
    """Opening a replica's store found damage: ``report`` as FileStore ``recovery_report``
    (dicts with ``file``, ``offset``, ``kind``, ``first_seq``, ``detail``)."""

    def __init__(self, report: list[dict]) -> None:
        super().__init__(f"{len(report)} problem(s) in the store, first: {report[0] if report else None}")
        self.report = report


class StoreMismatch(StreamSnapshotError):
    """The store's blocks open cleanly but its counts are not the snapshot's."""


class InterestOverride:
    """While a replica applies an entry, push-consumer interest comes from the entry (the
    leader's view when it proposed), not from this server's subscriptions."""

    __slots__ = ("subjects",)

    def __init__(self) -> None:
        self.subjects: frozenset[str] | None = None


class StreamReplica:
    """The state machine of one clustered stream's RAFT group on one server.

    ``account``: this server's JetStreamAccount holding the replica (created with
    ``clustered=True``); ``name``: the stream; ``emit(replies)``: sends what the leader's
    apply produced, in order; ``override``: the account's :class:`InterestOverride`;
    ``on_problem(detail)``: reports an entry that could not be decoded.

    Implements the RaftHost ``StateMachine`` protocol (apply, snapshot, restore,
    leader_changed). A replica opened without a snapshot starts empty and replays the
    group's log (see ``net/jetstream/cluster.py``). A file stream's :meth:`snapshot` is a
    :class:`~jetraft.jetstream.catchup.StreamSnapshot` (its store fsynced first), after
    which the host compacts the log; a memory stream's is None (its log is kept whole: its
    messages are on no disk). :meth:`restore` takes the stream apart and sets
    :attr:`holding` until :meth:`complete` (called once the store's blocks match the
    snapshot's manifest, fetched from peers where they did not: ``net/jetstream/catchup.py``).

    ``config``/``created_ns``: the assignment's stream config JSON and creation time (to
    re-create the stream from a snapshot); ``on_restore(replica)``: a snapshot is to be
    completed (start fetching).
    """

    def __init__(self, account: JetStreamAccount, name: str, *,
                 emit: Callable[[list[Reply]], None], override: InterestOverride,
                 on_problem: Callable[[str], None] | None = None,
                 on_leader: Callable[[str | None, int], None] | None = None,
                 config: dict[str, Any] | None = None, created_ns: int = 0,
                 on_restore: Callable[[StreamReplica], None] | None = None) -> None:
        self.account = account
        self.config = config
        self.created_ns = created_ns
        self.on_restore = on_restore
        #: The snapshot being completed (see :meth:`restore`), and whether this replica's
        #: own (``"restart"``) or one the leader sent (``"snapshot"``).
        self.pending: StreamSnapshot | None = None
        self.pending_reason = "snapshot"
        self._doomed = 0            # store blocks to delete once the snapshot is durable
        self.name = name
        self.emit = emit
        self.override = override
        self.on_problem = on_problem
        self.on_leader = on_leader
        self.is_leader = False
        self.term = 0                # the term this replica leads in (when is_leader)
        self.last_ts = 0             # the largest entry ts applied
        self.applied_term = 0        # the term of the last entry applied
        self.applied_index = 0
        self._proposed_ts = 0

    def next_ts(self, now_ns: int) -> int:
        """The ts of the next entry this (leader) replica proposes: ``now_ns``, or one more
        than any ts applied or proposed, whichever is larger (strictly increasing)."""
        ts = max(now_ns, self.last_ts + 1, self._proposed_ts + 1)
        self._proposed_ts = ts
        return ts

    # ------------------------------------------------------------------ StateMachine

    def apply(self, entries: list[Entry]) -> None:
        out: list[Reply] = []
        for e in entries:
            self.applied_index = max(self.applied_index, e.index)
            if e.term != self.applied_term:     # a leader change, as every replica sees it
                self.applied_term = e.term
                self.account.stream_term(self.name, e.term)
            if e.type != EntryType.NORMAL or not e.data:
                continue
            try:
                item = decode_entry(e.data)
            except EntryError as exc:
                if self.on_problem is not None:
                    self.on_problem(f"entry {e.index}: {exc}")
                continue
            replies = self._apply_one(item)
            if self.is_leader and e.term == self.term:
                out.extend(replies)
        if out:
            self.emit(out)

    def _apply_one(self, item: list[Any]) -> list[Reply]:
        kind, ts, interest = item[0], item[1], item[2]
        self.last_ts = max(self.last_ts, ts)
        acc = self.account
        entry = acc.streams.get(self.name)
        if entry is None:
            return []
        self.override.subjects = frozenset(interest)
        try:
            if kind == PUBLISH:
                return acc.publish(entry, item[3], item[4], item[5], item[6], ts)
            if kind == BATCH:
                return acc.apply_batch(entry, item[3], item[4], item[5], ts)
            if kind == API:
                if item[4] == LINK_REPLY:
                    return acc.link_api(item[3], item[4], item[6], ts)
                return acc.handle_api(item[3], item[4], item[5], item[6], ts) or []
            if kind == ACK:
                return acc.ack(item[3], item[4], item[5], ts)
            if kind == FLOW_CONTROL:
                return acc.flow_control(item[3], ts, item[4] if len(item) > 4 else None)
            if kind == SOURCED:
                return acc.apply_fetched(entry, item[3], item[4], ts)
            if kind == LINK:
                return acc.apply_link_step(self.name, LinkStep(item[3], item[4], tuple(item[5])), ts)
            return acc.poll_stream(self.name, ts, interest_changed=item[3])
        finally:
            self.override.subjects = None

    @property
    def holding(self) -> bool:
        """True while a restored snapshot waits for its store (see :meth:`restore`)."""
        return self.pending is not None

    def snapshot(self) -> bytes | None:
        """The stream's :class:`StreamSnapshot` as of the last applied entry, after an fsync
        of its store (the log it lets the host discard held those messages); None for a
        memory stream, a missing stream, or while holding. Raises StorageError when the
        fsync fails (the group stops: see ``net/raft/host.py``)."""
        if self.pending is not None:
            return None
        entry = self.account.streams.get(self.name)
        if entry is None:
            return None
        store = entry.stream.store
        if not isinstance(store, FileStore) or store.failed is not None:
            return None
        store.sync(force=True, keep_doomed=True)
        self._doomed = store.doomed_count()
        st = store.state()
        return StreamSnapshot(
            self.name, self.last_ts, store.block_bytes, store.manifest(), st.first_seq,
            st.last_seq, st.messages, st.bytes,
            state={"config": entry.stream.config.to_json(),
                   "created_ns": entry.stream.created_ns,
                   "replica": self.account.replica_state(self.name)}).encode()

    def snapshot_durable(self, index: int) -> None:
        """The snapshot just taken is durable: delete the blocks it no longer lists."""
        entry = self.account.streams.get(self.name)
        if entry is not None and isinstance(entry.stream.store, FileStore) and self._doomed:
            entry.stream.store.delete_doomed(self._doomed)
        self._doomed = 0

    def restore(self, data: bytes) -> None:
        """Take this replica's stream apart (its files stay) and hold until
        :meth:`complete`: ``on_restore`` brings the store's blocks to the snapshot's.
        Raises StreamSnapshotError for a snapshot that does not decode or is of another
        stream."""
        snap = StreamSnapshot.decode(data)
        if snap.stream != self.name:
            raise StreamSnapshotError(f"snapshot of stream {snap.stream!r} offered to {self.name!r}")
        reason = "restart" if self.account.streams.get(self.name) is None and \
            self.pending is None and self.applied_index == 0 else "snapshot"
        self.account.detach_replica(self.name)
        self.pending = snap
        self.pending_reason = reason
        if self.on_restore is not None:
            self.on_restore(self)

    def complete(self, now_ns: int, store: FileStore | None = None) -> None:
        """The store's blocks match the pending snapshot's manifest: open the stream over
        them (``store``: opened already, see ``JetStreamAccount.open_replica_store``), check
        its state against the snapshot's, restore the streams' and consumers' state, and
        stop holding. Raises :class:`StoreDamaged` when opening the store found damage (its
        ``report``: cut those blocks there and fetch them again), :class:`StoreMismatch`
        when the store's counts are not the snapshot's (fetch it all again),
        StreamSnapshotError or ReplicaStateError when the state does not restore; the
        replica keeps holding then (the store is closed)."""
        snap = self.pending
        if snap is None:
            if store is not None:
                store.close()
            return
        if store is not None and store.recovery_report:
            store.close()
            raise StoreDamaged(list(store.recovery_report))
        extra = snap.state
        config = extra.get("config") if isinstance(extra, dict) else None
        created = extra.get("created_ns") if isinstance(extra, dict) else None
        replica = extra.get("replica") if isinstance(extra, dict) else None
        if not isinstance(config, dict) or not isinstance(created, int) or not isinstance(replica, dict):
            if store is not None:
                store.close()
            raise StreamSnapshotError("stream snapshot: state lacks config/created_ns/replica")
        if config.get("name") != self.name:
            if store is not None:
                store.close()
            raise StreamSnapshotError(f"stream snapshot: its config names {config.get('name')!r}, "
                                      f"not {self.name!r}")
        try:
            entry = self.account.create_replica(config, created, keep_files=True, store=store)
        except Exception:
            if store is not None:
                store.close()
            raise
        st = entry.stream.store.state()
        got = (st.first_seq, st.last_seq, st.messages, st.bytes)
        want = (snap.first_seq, snap.last_seq, snap.messages, snap.bytes)
        if got != want:
            self.account.detach_replica(self.name)
            raise StoreMismatch(
                f"store holds (first, last, messages, bytes) {got}, the snapshot says {want}")
        try:
            self.account.restore_replica_state(self.name, replica, now_ns)
        except Exception:
            self.account.detach_replica(self.name)
            raise
        self.last_ts = max(self.last_ts, snap.last_ts)
        self.pending = None

    def start_empty(self) -> None:
        """No snapshot was restored on open: (re)create the stream empty, the group's log
        is replayed into it from its first entry."""
        if self.pending is None and self.account.streams.get(self.name) is None \
                and self.config is not None:
            self.account.create_replica(self.config, self.created_ns)

    def leader_changed(self, leader: str | None, term: int) -> None:
        self.term = term
        self.account.reset_links(self.name)     # a new leader starts its links from its store
        if self.on_leader is not None:
            self.on_leader(leader, term)
