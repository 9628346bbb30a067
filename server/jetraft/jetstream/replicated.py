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
    ["F", ts, interest, subject]                           a flow-control reply ($JS.FC...)
    ["T", ts, interest, interest_changed]                  the leader's timers fired

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

PUBLISH, API, ACK, FLOW_CONTROL, TICK = "P", "A", "K", "F", "T"

_ARITY = {PUBLISH: 7, API: 7, ACK: 6, FLOW_CONTROL: 4, TICK: 4}


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
    if len(item) != _ARITY[item[0]]:
        raise EntryError(f"stream entry {item[0]!r} has {len(item)} fields, wants {_ARITY[item[0]]}")
    kind, ts, interest = item[0], item[1], item[2]
    if not isinstance(ts, int) or ts < 0 or not isinstance(interest, list) \
            or not all(isinstance(s, str) for s in interest):
        raise EntryError("stream entry has a bad timestamp or interest list")
    strings = {PUBLISH: (3,), API: (3,), ACK: (3,), FLOW_CONTROL: (3,), TICK: ()}[kind]
    for i in strings:
        if not isinstance(item[i], str) or not item[i]:
            raise EntryError(f"stream entry {kind!r}: field {i} must be a subject")
    if kind in (PUBLISH, API, ACK) and item[4] is not None and not isinstance(item[4], str):
        raise EntryError(f"stream entry {kind!r}: reply must be a string or nil")
    if kind in (PUBLISH, API) and (item[5] is not None and not isinstance(item[5], bytes)
                                   or not isinstance(item[6], bytes)):
        raise EntryError(f"stream entry {kind!r}: headers/data must be bytes")
    if kind == ACK and not isinstance(item[5], bytes):
        raise EntryError("stream entry 'K': payload must be bytes")
    if kind == TICK and not isinstance(item[3], bool):
        raise EntryError("stream entry 'T': interest_changed must be a bool")
    return item


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
    leader_changed). The replica's stream starts empty and is rebuilt by replaying the
    group's log (see ``net/js_cluster.py``); :meth:`snapshot` therefore returns None, asking
    the host not to compact this group's log.
    """

    def __init__(self, account: JetStreamAccount, name: str, *,
                 emit: Callable[[list[Reply]], None], override: InterestOverride,
                 on_problem: Callable[[str], None] | None = None,
                 on_leader: Callable[[str | None, int], None] | None = None) -> None:
        self.account = account
        self.name = name
        self.emit = emit
        self.override = override
        self.on_problem = on_problem
        self.on_leader = on_leader
        self.is_leader = False
        self.term = 0                # the term this replica leads in (when is_leader)
        self.last_ts = 0             # the largest entry ts applied
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
            if kind == API:
                return acc.handle_api(item[3], item[4], item[5], item[6], ts) or []
            if kind == ACK:
                return acc.ack(item[3], item[4], item[5], ts)
            if kind == FLOW_CONTROL:
                return acc.flow_control(item[3], ts)
            return acc.poll_stream(self.name, ts, interest_changed=item[3])
        finally:
            self.override.subjects = None

    def snapshot(self) -> bytes | None:
        return None

    def restore(self, data: bytes) -> None:
        """Nothing to restore: this group never takes a snapshot (see the class docstring)."""

    def leader_changed(self, leader: str | None, term: int) -> None:
        self.term = term
        if self.on_leader is not None:
            self.on_leader(leader, term)
