"""The controller's shared state and its answers: the constants, the state every part reads
(the meta state, the view, what is in flight), and how replies, errors, audits and
advisories go out as actions (:mod:`jetraft.jetstream.cluster.actions`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft.jetstream.api import (
    JetStreamAccount,
    Reply,
)
from jetraft.jetstream.cluster.actions import (
    ClusterView,
    Emit,
    Key,
    Propose,
    Refusal,
    Send,
    ToMetaLeader,
)
from jetraft.jetstream.meta import (
    MetaState,
    StreamAssignment,
)
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.replicated import (
    BATCH,
    PUBLISH,
    EntryError,
    InterestOverride,
    decode_entry,
)
from jetraft.jetstream.requests import (
    ERROR_EXTRAS,
    json_bytes,
)
from jetraft.jetstream.usage import AccountUsage
from jetraft.raft.types import Entry, EntryType

META_GROUP = "_meta_"
#: Nanoseconds the routes must be quiet (no new peer) before the meta group is bootstrapped
#: once every configured route is up (discovered servers may still be arriving).
BOOTSTRAP_SETTLE_NS = 500_000_000
#: How many times a forwarded API request may be forwarded again (stale leader views).
MAX_HOPS = 3
#: Reply subjects remembered with the server their request came through.
MAX_ORIGINS = 10_000
#: Meta requests this server answers whose API audit waits for the answer (oldest out).
MAX_META_AUDITS = 1024
#: Nanoseconds between expiry ticks of a stream with a max_age.
EXPIRY_CHECK_NS = 250_000_000
#: Nanoseconds the route to a restoring server may be down before the meta leader deletes
#: the stream it was restoring (the backup's data was on that server alone).
RESTORE_LOST_NS = 10_000_000_000
#: Nanoseconds a RESTORE proposed by this meta leader holds its name before it is applied,
#: and a STREAM.CREATE counts against the account's ``max_streams`` before it is applied.
RESTORE_PROPOSED_NS = 5_000_000_000


@dataclass(frozen=True, slots=True)
class StartRestore:
    """On the server restoring stream ``assignment`` (its ``restored_by``), now leader of
    its group: answer the RESTORE request ``reply`` with a deliver subject, receive the
    backup, build the stream and hand it to the other peers (``net/jetstream/snapshot.py``,
    ``net/jetstream/cluster.py``)."""

    assignment: StreamAssignment
    reply: str

#: API subjects the stream's leader holds interest in (``{}``: the stream), so that requests
#: from any server reach it along the same route as the publishes and acks. Meta requests
#: (create, delete, update) are not among them: they go to the meta leader.
LEADER_API_SUBJECTS = (
    "$JS.API.STREAM.INFO.{}", "$JS.API.STREAM.PURGE.{}", "$JS.API.STREAM.MSG.GET.{}",
    "$JS.API.STREAM.MSG.DELETE.{}", "$JS.API.STREAM.LEADER.STEPDOWN.{}",
    "$JS.API.CONSUMER.CREATE.{}", "$JS.API.CONSUMER.CREATE.{}.>",
    "$JS.API.CONSUMER.DURABLE.CREATE.{}.>", "$JS.API.CONSUMER.NAMES.{}",
    "$JS.API.CONSUMER.LIST.{}", "$JS.API.CONSUMER.INFO.{}.>", "$JS.API.CONSUMER.DELETE.{}.>",
    "$JS.API.CONSUMER.MSG.NEXT.{}.>", "$JS.API.CONSUMER.LEADER.STEPDOWN.{}.>",
    "$JS.API.CONSUMER.RESET.{}.>", "$JS.API.CONSUMER.PAUSE.{}.>", "$JS.API.CONSUMER.UNPIN.{}.>",
    "$JS.API.DIRECT.GET.{}", "$JS.API.DIRECT.GET.{}.>",
    # a snapshot is served by the leader (net/jetstream/snapshot.py), its chunk acks come back to it
    "$JS.API.STREAM.SNAPSHOT.{}", "$JS.SNAPSHOT.ACK.{}.>",
)

#: API requests about one stream that change it: replicated as an "A" entry.
STREAM_WRITES = {"STREAM.PURGE", "STREAM.MSG.DELETE", "CONSUMER.CREATE", "CONSUMER.DURABLE",
                  "CONSUMER.DELETE", "CONSUMER.MSG", "STREAM.UPDATE", "CONSUMER.RESET",
                  "CONSUMER.PAUSE", "CONSUMER.UNPIN"}

#: API requests about one stream that only read it: its leader answers them once a
#: ReadIndex round confirms it still leads and its state holds every acknowledged write
#: (:class:`~jetraft.jetstream.cluster.actions.Read`).
STREAM_READS = {"STREAM.INFO", "STREAM.MSG.GET", "CONSUMER.INFO", "CONSUMER.NAMES", "CONSUMER.LIST",
                 "DIRECT.GET"}


def restore_in_progress() -> E.JSApiError:
    """What a stream being restored answers a publish or a change (10194, as nats-server's
    JSStreamOfflineReasonErrF)."""
    return E.api_error("JSStreamOfflineReasonErrF", err="a restore of the stream is in progress")


def zone_of(tags: tuple[str, ...], unique_tag: str) -> str | None:
    """The value of the first tag starting with ``unique_tag`` (``"az:"``), or None."""
    if not unique_tag:
        return None
    for tag in tags:
        if tag.lower().startswith(unique_tag):
            return tag[len(unique_tag):]
    return None


# ---------------------------------------------------------------------- the controller




class ControllerCore:
    """The state of one server's :class:`~jetraft.jetstream.cluster.ClusterController`
    and what every part of it uses: pending actions (``_out``, taken by :meth:`_take`),
    replies and errors, the meta group's leader and peers."""

    def __init__(self, *, server_name: str, cluster_name: str, server_tags: tuple[str, ...],
                 unique_tag: str, system_account: str, accounts: Mapping[str, JetStreamAccount],
                 view: ClusterView, store_id: str = "") -> None:
        self.me = server_name
        #: this server's store id (see jetraft.jetstream.meta "Store identities")
        self.store_id = store_id
        self.cluster_name = cluster_name
        self.server_tags = tuple(server_tags)
        self.unique_tag = unique_tag
        self.system_account = system_account
        self.accounts = accounts
        self.view = view
        self.meta = MetaState()
        self.override = InterestOverride()
        self._out: list[Any] = []
        self._meta_replies: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._meta_reply_accounts: dict[tuple[str, str, str], str] = {}
        self._interest: dict[Key, list[str]] = {}
        self._interest_seen: dict[Key, frozenset[str]] = {}
        self._last_tick: dict[Key, int] = {}
        #: reply subject -> the server a forwarded request came from (bounded, oldest out)
        self._origins: OrderedDict[str, str] = OrderedDict()
        self._origin: str | None = None      # the origin of the request being handled
        #: reply subject -> (account, subject, request, client info) of a meta request this
        #: server (the meta leader) answers: its API audit, once answered (bounded)
        self._meta_audits: OrderedDict[str, tuple[str, str, bytes, dict[str, Any] | None]] = OrderedDict()
        self._last_peer_change_ns: int | None = None
        #: replicas this server is leaving that saw a leader named in the assignment
        #: (see :meth:`_maybe_leave`)
        self._leaving: set[Key] = set()
        #: the reply subject of the STREAM.CREATE (or RESTORE) that assigned a replica this
        #: server opened: its first leader answers it (:meth:`leader_changed`)
        self._create_replies: dict[Key, str] = {}
        self._now = 0                        # ns since the epoch, of the input being handled
        #: before the meta group is open: the peers to open it with as told by a server
        #: of an established group (:meth:`meta_hello`), and whether one said we were removed
        self._join: tuple[str, ...] | None = None
        self._refused_by: str | None = None
        #: a server whose meta state records a store for this one said so while its group
        #: had no leader: the group exists, so wait for its leader, never bootstrap
        self._group_exists_by: str | None = None
        #: joined an established group as a new member (or one that lost its store): no
        #: vote and no replica until the meta state records this server's store id
        self.join_fresh = False
        #: the store id each connected server said it runs with (its hellos)
        self.peer_stores: dict[str, str] = {}
        #: meta entries this leader proposed and is waiting to see applied -> mono ns
        self._pending: dict[bytes, int] = {}
        self._fill_failed: set[Key] = set()
        self._filled_at = -(10**18)
        self._member_said = False
        self._mono = 0
        #: streams whose restore this server runs (see :class:`StartRestore`)
        self.restores: set[Key] = set()
        #: Restores whose bytes :meth:`restore_limits_check` admitted and that are not yet
        #: attached here (:meth:`restore_attached`): key -> (memory storage, bytes); counted
        #: against the account's limits, so two restores ending together cannot both fit
        #: in room for one.
        self._installing: dict[Key, tuple[bool, int]] = {}
        #: on the meta leader: restores proposed and not applied yet -> when (ns)
        self._restore_proposed: dict[Key, int] = {}
        #: streams this meta leader proposed to create, not applied yet: (proposal time in
        #: ns, the checked config, the assignment proposed)
        self._create_proposed: dict[Key, tuple[int, StreamConfig, StreamAssignment]] = {}
        #: stream updates this meta leader proposed, not applied yet: (time in ns, new config)
        self._update_proposed: dict[Key, tuple[int, StreamConfig]] = {}
        #: the other servers' reports of what each account stores (max_mem / max_file)
        self.usage = AccountUsage()
        #: the meta group is replaying its snapshot and log at start-up: replicas are opened
        #: once, after it (:meth:`ensure_assigned`), from the state the replay ends in, so a
        #: stream the snapshot holds but the log deletes never gets its group opened again
        self.replaying = False

    def _take(self) -> list[Any]:
        out, self._out = self._out, []
        return out

    def interest(self, account: str, subject: str) -> bool:
        """Push-consumer interest as a replica must see it: the applying entry's view
        while one is applied, otherwise the cluster's subscriptions."""
        subjects = self.override.subjects
        if subjects is not None:
            return subject in subjects
        return self.view.has_interest(account, subject)

    def _push_interest(self, acc: JetStreamAccount, stream: str, extra: str | None = None) -> frozenset[str]:
        """The subjects the stream's consumers deliver to that have subscribers now: push
        deliver subjects and the reply inboxes of waiting pull requests (plus ``extra``,
        the inbox of a pull request being proposed). Carried in every entry."""
        entry = acc.streams.get(stream)
        if entry is None:
            return frozenset()
        out = {extra} if extra else set()
        for consumer in entry.consumers.values():
            subjects = [consumer.config.deliver_subject] if consumer.config.deliver_subject else []
            subjects.extend(consumer.waiting_replies())
            for subject in subjects:
                if subject not in out and self.view.has_interest(acc.name, subject):
                    out.add(subject)
        return frozenset(out)

    def _emit(self, event: str, **fields: Any) -> None:
        self._out.append(Emit(event, fields))

    def send(self, account: str, out: Outbound) -> list[Any]:
        """A reply or delivery to route (also what replicas' applies produce). A reply to a
        request that reached us through another server goes back through that server when
        no subscription for it is known here yet (the requester's interest may still be on
        its way, on another route)."""
        self._send(account, out)
        return self._take()

    def send_replies(self, account: str, replies: list[Reply]) -> list[Any]:
        """:meth:`send` for each of a state machine's replies, in order."""
        for r in replies:
            self._send(r.account or account, r.out)
        return self._take()

    def _send(self, account: str, out: Outbound) -> None:
        origin = self._origins.get(out.subject)
        via = origin if origin is not None and not self.view.has_interest(account, out.subject) else None
        self._out.append(Send(account, out, via))

    def _remember_origin(self, reply: str | None, origin: str | None) -> None:
        if not reply or not origin or origin == self.me:
            return
        origins = self._origins
        origins[reply] = origin
        origins.move_to_end(reply)
        while len(origins) > MAX_ORIGINS:
            origins.popitem(last=False)

    def _respond(self, account: str, reply: str | None, body: dict[str, Any]) -> None:
        if reply:
            data = json_bytes(body)
            self._send(account, Outbound(reply, None, None, data))
            if self._meta_audits:
                self._audit_answer(reply, data)

    def _audit_answer(self, reply: str, response: bytes) -> None:
        """The API audit of a meta request answered here (nats-server audits every answered
        API request where it is answered), with the client info its request carried."""
        ctx = self._meta_audits.pop(reply, None)
        if ctx is None:
            return
        account, subject, request, client = ctx
        acc = self.accounts.get(account)
        if acc is not None:
            for r in acc.audit(subject, request, response, client, self._now):
                self._send(account, r.out)

    def _error(self, account: str, reply: str | None, rtype: str, err: E.JSApiError) -> None:
        """An error reply with the fields nats-server keeps in its error responses (its
        JSApiStreamRestoreResponse has no omitempty on ``deliver_subject``)."""
        extras = {"deliver_subject": ""} if rtype == E.STREAM_RESTORE_RESPONSE else ERROR_EXTRAS.get(rtype, {})
        self._respond(account, reply, {**E.error_response(rtype, err), **extras})

    def _meta_answer(self, op: str, account: str, stream: str, body: dict[str, Any],
                     reply_account: str | None = None) -> list[Any]:
        """The Send answering a meta request waiting for its entry to apply (none if none)."""
        pending = self._meta_replies.pop((op, account, stream), None)
        if pending is None:
            return []
        reply, rtype = pending
        saved, self._out = self._out, []
        self._respond(reply_account or account, reply, {"type": rtype, **body})
        answer, self._out = self._out, saved
        return answer

    def _answer_meta(self, op: str, account: str, stream: str, body: dict[str, Any],
                     reply_account: str | None = None) -> None:
        self._out.extend(self._meta_answer(op, account, stream, body, reply_account))

    def refusal(self, action: Refusal) -> list[Any]:
        """The reply a :class:`Refusal` stands for: 10008 as the API response
        ``action.rtype``, or as the PubAck of ``action.stream`` when ``rtype`` is None."""
        err = E.cluster_not_available()
        if action.rtype is None:
            self._respond(action.account, action.reply,
                          {"error": err.to_json(), "stream": action.stream, "seq": 0})
        else:
            self._error(action.account, action.reply, action.rtype, err)
        return self._take()

    def refuse_unsynced(self, key: Key, entries: list[Entry], err: dict[str, Any]) -> list[Any]:
        """The publishes this (leader) server proposed in ``entries`` that its log never made
        durable: each gets the PubAck error ``err`` (their proposers would otherwise wait
        for an answer that cannot come from here)."""
        for e in entries:
            if e.type != EntryType.NORMAL or not e.data:
                continue
            try:
                item = decode_entry(e.data)
            except EntryError:
                continue
            if item[0] in (PUBLISH, BATCH) and item[4]:
                self._respond(key[0], item[4], {"error": err, "stream": key[1], "seq": 0})
        return self._take()

    def _propose_once(self, data: bytes, *, via_leader: bool = False) -> None:
        """Propose a meta entry (``via_leader``: have the meta leader propose it) unless
        the same one was asked for within the last second (the tick asks every 0.1 s until
        it is applied)."""
        last = self._pending.get(data)
        if last is not None and self._mono - last < 1_000_000_000:
            return
        if len(self._pending) > 1024:
            self._pending.clear()
        self._pending[data] = self._mono
        self._out.append(ToMetaLeader(data) if via_leader else Propose(META_GROUP, data))

    def _meta_peers(self) -> tuple[str, ...]:
        group = self.view.meta_group_view()
        return tuple(group.peers) if group is not None else ()

    def _restoring(self, key: Key) -> bool:
        sa = self.meta.streams.get(key)
        return sa is not None and sa.restore is not None

    def _led(self, account: str, stream: str) -> bool:
        group = self.view.group((account, stream))
        return group is not None and group.is_leader

    def _meta_leader(self) -> str | None:
        group = self.view.meta_group_view()
        return group.leader if group is not None else None

    def _reachable(self, peers: tuple[str, ...]) -> str | None:
        routes = self.view.route_peers()
        for name in peers:
            if name in routes:
                return name
        return None

    def _stream_advisory(self, account: str, stream: str, action: str) -> None:
        """The ``stream_action`` advisory of ``stream`` (``$JS.EVENT.ADVISORY.STREAM.CREATED``
        / ``DELETED``), sent by the server that answers the request, when someone listens."""
        acc = self.accounts.get(account)
        if acc is not None:
            for r in acc.advise(adv.stream_action, stream, action, self._now):
                self._send(account, r.out)
