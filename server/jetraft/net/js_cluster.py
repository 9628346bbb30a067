"""The JetStream cluster on trio: the meta group, one RAFT group per stream, API routing.

:class:`ClusterJetStream` runs inside :class:`~jetraft.net.jetstream.JetStreamService` when
the server has a ``cluster`` block. Its parts, and where nats-server does the same:

- **RAFT** (:class:`~jetraft.net.raft_host.RaftHost`): every group's messages travel in
  route APP frames of kind ``"raft"``; logs live under ``<store_dir>/jetstream/_raft/``.
- **The meta group** (``_meta_``) spans every JetStream server of the cluster. Its state
  (:class:`~jetraft.jetstream.meta.MetaState`) holds the stream assignments: name, config,
  RAFT group and peers (nats-server jetstream_cluster.go streamAssignment). The group is
  bootstrapped once the routes to every configured route are up (the seed configuration
  lists all servers); a restarted server reopens it from its log.
- **Stream groups**: each server in an assignment's peers holds a replica
  (:class:`~jetraft.jetstream.replicated.StreamReplica`) and a RAFT group. The leader
  attracts the stream's subjects and its ``$JS.ACK``/``$JS.FC`` subjects with internal
  route interest (nats-server subscribes the stream leader only, stream.go
  subscribeToStream), proposes every input and answers once it is committed and applied.
  With no leader nobody has interest, so a publish gets a 503 no-responders status rather
  than a silent drop.
- **API routing**: requests about one stream and its consumers travel on the stream
  leader's interest in those API subjects (on the same route as the publishes and acks
  before them, so a pull request never overtakes an ack). Stream create/delete/update/list,
  peer-remove, SERVER.REMOVE and meta step-down go to the meta leader in route APP frames
  (``"jsapi"``). Replies travel back as ordinary messages to the requester's inbox, or
  through the server the request came from (``"jsreply"``) while the inbox's interest has
  not reached the answering server yet.
- **Placement** (:mod:`jetraft.jetstream.placement`): replicas on online JetStream servers,
  honouring ``unique_tag`` and placement tags; error 10005 when impossible.
- **Reconciliation**: every stream leader drives its group's membership towards the
  assignment's peers one change at a time, removing before adding (peer-remove keeps
  quorum with the remaining replicas; the new one catches up through the log).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import msgpack
import trio

from jetraft.jetstream import errors as E
from jetraft.jetstream.api import (
    _ERROR_EXTRAS,
    API_PREFIX,
    LIST_LIMIT,
    NAMES_LIMIT,
    JetStreamAccount,
    Reply,
    _int_field,
    _json_bytes,
    _str_field,
    decode_request,
)
from jetraft.jetstream.meta import (
    MetaState,
    StreamAssignment,
    encode_assign_stream,
    encode_remove_stream,
    encode_remove_server,
    encode_replace_stream_peer,
    encode_update_stream,
    group_name,
)
from jetraft.jetstream.model import StreamConfig, StreamInfo, StreamState, format_time, stream_subjects_overlap
from jetraft.jetstream.consumer import Delivery
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.placement import PeerInfo, PlacementError, select_peers
from jetraft.jetstream.replicated import (
    ACK,
    API,
    FLOW_CONTROL,
    PUBLISH,
    TICK,
    EntryError,
    InterestOverride,
    StreamReplica,
    decode_entry,
    encode_entry,
)
from jetraft.net.durability import PROBE_TIMEOUT_S, STORAGE_RETRY_S, probe_directory, storage_api_error
from jetraft.net.raft_host import RaftGroup, RaftHost
from jetraft.protocol.subjects import subjects_overlap
from jetraft.raft.types import NotLeaderError, ProposalDroppedError, RaftError
from jetraft.raft.storage import StorageError
from jetraft.raft.storage.fileio import errno_name
from jetraft.raft.types import EntryType, Role

if TYPE_CHECKING:
    from jetraft.net.jetstream import JetStreamService

META_GROUP = "_meta_"
#: Seconds the routes must be quiet (no new peer) before the meta group is bootstrapped
#: once every configured route is up (discovered servers may still be arriving).
BOOTSTRAP_SETTLE_S = 0.5
#: Seconds between membership reconciliation and timer checks of led groups.
RECONCILE_S = 0.1
#: How many times a forwarded API request may be forwarded again (stale leader views).
MAX_HOPS = 3
#: Reply subjects remembered with the server their request came through.
MAX_ORIGINS = 10_000
#: Seconds between expiry ticks of a stream with a max_age.
EXPIRY_CHECK_S = 0.25

#: API subjects the stream's leader holds interest in (``{}``: the stream), so that requests
#: from any server reach it along the same route as the publishes and acks. Meta requests
#: (create, delete, update) are not among them: they go to the meta leader.
_LEADER_API_SUBJECTS = (
    "$JS.API.STREAM.INFO.{}", "$JS.API.STREAM.PURGE.{}", "$JS.API.STREAM.MSG.GET.{}",
    "$JS.API.STREAM.MSG.DELETE.{}", "$JS.API.STREAM.LEADER.STEPDOWN.{}",
    "$JS.API.CONSUMER.CREATE.{}", "$JS.API.CONSUMER.CREATE.{}.>",
    "$JS.API.CONSUMER.DURABLE.CREATE.{}.>", "$JS.API.CONSUMER.NAMES.{}",
    "$JS.API.CONSUMER.LIST.{}", "$JS.API.CONSUMER.INFO.{}.>", "$JS.API.CONSUMER.DELETE.{}.>",
    "$JS.API.CONSUMER.MSG.NEXT.{}.>", "$JS.API.CONSUMER.LEADER.STEPDOWN.{}.>",
    "$JS.API.DIRECT.GET.{}", "$JS.API.DIRECT.GET.{}.>",
)

#: API requests about one stream that change it: replicated as an "A" entry.
_STREAM_WRITES = {"STREAM.PURGE", "STREAM.MSG.DELETE", "CONSUMER.CREATE", "CONSUMER.DURABLE",
                  "CONSUMER.DELETE", "CONSUMER.MSG", "STREAM.UPDATE"}


_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _peer_hash(name: str) -> str:
    """nats-server's 8-character peer id of a server name (events.go getHash: the first 8
    bytes of its SHA-256, each mapped onto 62 digits)."""
    digest = hashlib.sha256(name.encode()).digest()
    return "".join(_DIGITS[b % 62] for b in digest[:8])


def _ack_stream(subject: str) -> str:
    """The stream named by an ack or flow-control subject: ``$JS.ACK.<stream>.<consumer>...``
    (v1), ``$JS.ACK.<domain>.<account hash>.<stream>...`` (v2) or ``$JS.FC.<stream>...``."""
    ack = subject.startswith("$JS.ACK.")
    rel = subject[len("$JS.ACK." if ack else "$JS.FC."):].split(".")
    if ack and len(rel) >= 9 and len(rel) != 7:
        return rel[2]
    return rel[0]


def _api_kind(tokens: list[str]) -> str:
    """``AREA.OP`` of an API subject; ``STREAM.MSG.GET``/``STREAM.MSG.DELETE`` keep the verb."""
    if tokens[2:4] == ["STREAM", "MSG"] and len(tokens) > 4:
        return ".".join(tokens[2:5])
    return ".".join(tokens[2:4])


def _stream_of(tokens: list[str]) -> str | None:
    """The stream an API subject is about, or None (nats-server jetstream_api.go subjects)."""
    kind = _api_kind(tokens)
    n = len(tokens)
    if kind in ("STREAM.MSG.GET", "STREAM.MSG.DELETE") and n == 6:
        return tokens[5]
    if kind in ("CONSUMER.MSG",) and n == 7:
        return tokens[5]
    if kind == "CONSUMER.DURABLE" and n >= 6:
        return tokens[5]
    if kind == "CONSUMER.LEADER" and n == 7:
        return tokens[5]
    if kind == "STREAM.LEADER" and n == 6:
        return tokens[5]
    if kind == "STREAM.PEER" and n == 6:
        return tokens[5]
    if n >= 5 and tokens[2] in ("STREAM", "CONSUMER", "DIRECT"):
        return tokens[4]
    return None


class ClusterJetStream:
    """The clustered half of JetStream on one server (see the module docstring).

    ``service``: the server's JetStreamService, whose accounts were created with
    ``clustered=True`` and whose interest functions consult :attr:`override`.
    ``await nursery.start(cluster.run)`` starts the RAFT host and the bootstrap/reconcile
    loop; it returns at once (the meta group forms in the background).
    """

    def __init__(self, service: JetStreamService) -> None:
        self.service = service
        self.server = server = service.server
        self.routes = server.routes
        self.events = server.events
        self.cluster_name = server.config.cluster.name or ""
        self.unique_tag = service.config.unique_tag
        self.zone = self._zone_of(server.config.server_tags)
        self.override = InterestOverride()
        self.meta = MetaState()
        self.meta_group: RaftGroup | None = None
        self.replicas: dict[tuple[str, str], StreamReplica] = {}
        self.groups: dict[tuple[str, str], RaftGroup] = {}
        self._meta_replies: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._meta_reply_accounts: dict[tuple[str, str, str], str] = {}
        self._meta_snapshot_ns = 0          # when the meta state was last snapshotted
        self._interest: dict[tuple[str, str], list[str]] = {}
        self._last_tick: dict[tuple[str, str], float] = {}
        #: reply subject -> the server a forwarded request came from (bounded, oldest out)
        self._origins: OrderedDict[str, str] = OrderedDict()
        self._origin: str | None = None      # the origin of the request being handled
        self._interest_seen: dict[tuple[str, str], frozenset[str]] = {}
        self._last_peer_change = time.monotonic()
        raft_dir = os.path.join(service.store_dir, "jetstream", "_raft")
        self.host = RaftHost(server.server_name, raft_dir, self._send_raft, events=server.events,
                             zone=self.zone, sync=service.commit,
                             flush=server.flush_outbound,
                             pass_follows=lambda: server.in_read)
        server.after_read_hooks.append(self.host.pass_now)
        self.routes.on_app("raft", self.host.receive)
        self.routes.on_app("jsapi", self._on_forwarded_api)
        self.routes.on_app("jsreply", self._on_reply)
        self.routes.on_peer_change(self._on_peer_change)
        for acc in service.accounts.values():
            acc.cluster_info = self._cluster_info_fn(acc.name)
        #: RAFT groups stopped on this server by a storage failure, by group name (see
        #: "storage failures" below).
        self.storage_failures: dict[str, StorageFailure] = {}
        self.host.on_group_failed = self._group_failed

    def _zone_of(self, tags: tuple[str, ...]) -> str | None:
        prefix = self.unique_tag
        if not prefix:
            return None
        for tag in tags:
            if tag.lower().startswith(prefix):
                return tag[len(prefix):]
        return None

    # ------------------------------------------------------------------ transport

    def _send_raft(self, peer: str, payload: bytes) -> bool:
        return self.routes.send_app(peer, "raft", payload)

    def _on_peer_change(self, name: str, connected: bool) -> None:
        self._last_peer_change = time.monotonic()
        if connected:
            self.host.peer_up(name)
        else:
            self.host.peer_down(name)

    # ------------------------------------------------------------------ tasks

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.host.run)
            if META_GROUP in self.host.logs.groups():
                self._open_meta(())
            nursery.start_soon(self._bootstrap_and_reconcile)
            nursery.start_soon(self._retry_storage)
            task_status.started()

    def _expected_servers(self) -> int:
        """How many servers the configured routes name (ourselves included once)."""
        targets = self.routes.targets()
        others = sum(1 for t in targets if not t.is_self)
        return max(others + 1, len(self.routes.peers) + 1)

    def _routes_settled(self) -> bool:
        """Every route this server dials (configured or discovered) reached its server,
        or turned out to be ourselves."""
        peers = self.routes.peers
        for target in self.routes.targets():
            if not target.is_self and (target.peer_name is None or target.peer_name not in peers):
                return False
        return True

    async def _bootstrap_and_reconcile(self) -> None:
        while True:
            await trio.sleep(RECONCILE_S)
            if self.meta_group is None:
                self._maybe_bootstrap()
                continue
            self._reconcile()

    def _maybe_bootstrap(self) -> None:
        js_peers = sorted(n for n, p in self.routes.peers.items() if p.jetstream)
        # Every route is up (one of them may be ourselves), then a quiet moment: the seed
        # configuration names every server, and discovery brings the rest meanwhile.
        if not self._routes_settled():
            return
        if time.monotonic() - self._last_peer_change < BOOTSTRAP_SETTLE_S:
            return
        self._open_meta(tuple(sorted({self.server.server_name, *js_peers})))

    def _open_meta(self, peers: tuple[str, ...]) -> None:
        failure = self.storage_failures.get(META_GROUP)
        if failure is not None and failure.retry_at > trio.current_time():
            return
        machine = _MetaMachine(self)
        try:
            self.meta_group = self.host.open_group(META_GROUP, peers, machine)
        except (StorageError, OSError) as exc:      # retried by the bootstrap loop
            self._storage_failed(META_GROUP, None, exc, "open")
            return
        if failure is not None:
            self._storage_resumed(failure)
        self.events.emit("jetstream_enabled", store_dir=self.service.store_dir,
                         accounts=sorted(self.service.accounts), sync="raft")

    def _reconcile(self) -> None:
        now = time.time_ns()
        for key, group in list(self.groups.items()):
            replica = self.replicas.get(key)
            if replica is None or not group.is_leader:
                continue
            sa = self.meta.streams.get(key)
            if sa is not None:
                self._reconcile_peers(group, sa)
            self._maybe_tick(key, replica, group, now)

    def _reconcile_peers(self, group: RaftGroup, sa: StreamAssignment) -> None:
        want = set(sa.peers)
        have = set(group.peers)
        try:
            extra = sorted(have - want)
            if extra:
                if extra[0] == self.server.server_name:
                    group.step_down()
                else:
                    group.remove_peer(extra[0])
                return
            missing = sorted(want - have)
            if missing:
                group.add_peer(missing[0])
        except (RaftError, ValueError):
            return      # a change is in flight: try again next round

    def _maybe_tick(self, key: tuple[str, str], replica: StreamReplica, group: RaftGroup,
                    now: int) -> None:
        """Propose a TICK when the leader's push interest changed, a consumer timer is due,
        or (every EXPIRY_CHECK_S) the stream has a max_age. A tick still in flight may be
        proposed again: applying a poll twice is harmless."""
        acc = self.service.accounts.get(key[0])
        if acc is None:
            return
        interest = self._push_interest(acc, key[1])
        changed = interest != self._interest_seen.get(key, frozenset())
        deadline = acc.stream_deadline(key[1])
        entry = acc.streams.get(key[1])
        mono = time.monotonic()
        expiry = (entry is not None and entry.stream.config.max_age > 0
                  and mono - self._last_tick.get(key, 0.0) >= EXPIRY_CHECK_S)
        if not changed and not expiry and (deadline is None or deadline > now):
            return
        self._interest_seen[key] = interest
        self._last_tick[key] = mono
        self._propose(group, encode_entry(TICK, replica.next_ts(now), interest, changed))

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
                if subject not in out and self._has_interest(acc.name, subject):
                    out.add(subject)
        return frozenset(out)

    def _has_interest(self, account: str, subject: str) -> bool:
        match = self.server.account(account).sublist.match(subject)
        return bool(match.plain or match.queues) or self.routes.has_remote_interest(account, subject)

    def interest(self, account: str, subject: str) -> bool:
        """Push-consumer interest as a replica must see it: the applying entry's view
        while one is applied, otherwise the cluster's subscriptions."""
        subjects = self.override.subjects
        if subjects is not None:
            return subject in subjects
        return self._has_interest(account, subject)

    # ------------------------------------------------------------------ meta changes

    def meta_applied(self, changes: list[Any]) -> None:
        """Act on the MetaState's changes, in order. A change to a stream assignment that
        the MetaState no longer holds (deleted, or deleted and created again with another
        RAFT group, later in the same batch) is skipped: its removal follows in the list."""
        streams = self.meta.streams
        for change in changes:
            kind = change.kind
            sa = change.assignment
            if kind in ("stream_added", "stream_updated", "stream_peers_changed"):
                now = streams.get((sa.account, sa.name))
                if now is None or now.group != sa.group:
                    continue
                self._ensure_replica(sa, kind)
            elif kind == "stream_removed":
                self._drop_replica((sa.account, sa.name), delete=True)
                self._answer_meta("delete", sa.account, sa.name, {"success": True})
            elif kind == "server_removed":
                self._server_removed(change)

    def _server_removed(self, change: Any) -> None:
        """A server left for good: answer SERVER.REMOVE, and (meta leader) give each of its
        streams a replacement replica under the same placement rules."""
        if change.assignment is None:
            key = ("server-remove", "", change.server)
            account = self._meta_reply_accounts.pop(key, None)
            if account is not None:
                self._answer_meta("server-remove", "", change.server, {"success": True}, account)
            return
        sa = change.assignment
        if not isinstance(sa, StreamAssignment) or self._meta_leader() != self.server.server_name:
            return
        remaining = tuple(p for p in sa.peers if p != change.server)
        try:
            new = self._place(sa, exclude=(change.server,), existing=remaining)
        except PlacementError as exc:
            self.events.emit("jetstream_placement_failed", account=sa.account, stream=sa.name,
                             replicas=len(sa.peers), reason=str(exc))
            return
        added = [p for p in new if p not in remaining]
        if added:
            self._propose_meta(encode_replace_stream_peer(sa.account, sa.name, change.server, added[0]))
            self.events.emit("jetstream_peer_removed", account=sa.account, stream=sa.name,
                             group=sa.group, peer=change.server, replacement=added[0])

    def _propose_meta(self, data: bytes) -> None:
        try:
            self.meta_group.propose(data)
        except RaftError:
            pass    # no longer the meta leader: the new one decides

    def _place(self, sa: StreamAssignment, *, exclude: tuple[str, ...] = (),
               existing: tuple[str, ...] = ()) -> list[str]:
        """Peers for ``sa``'s replicas under its placement (PlacementError if impossible)."""
        placement = StreamConfig.from_json(sa.config).placement
        return select_peers(
            self._peer_infos(), len(sa.peers), unique_tag=self.unique_tag,
            placement_tags=tuple(getattr(placement, "tags", None) or ()) if placement else (),
            exclude=exclude, existing=existing, load=self.meta.load())

    def _ensure_replica(self, sa: StreamAssignment, kind: str) -> None:
        key = (sa.account, sa.name)
        me = self.server.server_name
        if me not in sa.peers:
            if key in self.replicas:
                self._drop_replica(key, delete=True)
            if kind == "stream_peers_changed":
                self._answer_meta("peer-remove", sa.account, sa.name, {"success": True})
            return
        acc = self.service.accounts.get(sa.account)
        if acc is None:
            return
        if key in self.replicas:
            if kind == "stream_peers_changed":
                self._answer_meta("peer-remove", sa.account, sa.name, {"success": True})
            return
        try:
            acc.create_replica(sa.config, sa.created_ns)
        except E.JSApiError as err:
            self.events.emit("jetstream_recovery_problem", account=sa.account, stream=sa.name,
                             consumer=None, path="", detail=f"replica not created: {err}")
            return
        except (StorageError, OSError) as exc:      # retried (see "storage failures")
            self._storage_failed(sa.group, key, exc, "open")
            return
        replica = StreamReplica(acc, sa.name, emit=self._emitter(sa.account), override=self.override,
                                on_problem=self._problem_fn(sa),
                                on_leader=self._leader_fn(key))
        replica.pending_reply = sa.reply
        self.replicas[key] = replica
        # A replacement joins the group as it is now (the others); its log then replays
        # every membership change, each a no-op or a step towards the current peers.
        joining = kind == "stream_peers_changed"
        bootstrap = tuple(p for p in sa.peers if p != me) if joining else tuple(sa.peers)
        # Followers learn a stream's commit index from the next AppendEntries or heartbeat:
        # one message per publish per follower instead of two (see Config.commit_broadcast).
        try:
            group = self.host.open_group(sa.group, bootstrap, replica, commit_broadcast=False)
        except (StorageError, OSError) as exc:      # retried (see "storage failures")
            self.replicas.pop(key, None)
            self._storage_failed(sa.group, key, exc, "open")
            return
        self.groups[key] = group
        if not joining and group.node.last_index == 0 and sa.peers and sa.peers[0] == me:
            group.campaign()       # a brand-new group: the first peer need not wait a timeout
        if kind == "stream_peers_changed":
            self._answer_meta("peer-remove", sa.account, sa.name, {"success": True})

    def _drop_replica(self, key: tuple[str, str], *, delete: bool) -> None:
        replica = self.replicas.pop(key, None)
        group = self.groups.pop(key, None)
        self._set_leader_interest(key, False)
        if group is not None:
            self.host.close_group(group.name, delete=delete)
        acc = self.service.accounts.get(key[0])
        if replica is not None and acc is not None:
            acc.delete_replica(key[1])
            self.events.emit("jetstream_stream_deleted", account=key[0], stream=key[1])

    def _problem_fn(self, sa: StreamAssignment):
        def problem(detail: str) -> None:
            self.events.emit("jetstream_recovery_problem", account=sa.account, stream=sa.name,
                             consumer=None, path=sa.group, detail=detail)
        return problem

    def _emitter(self, account: str):
        def emit(replies: list[Reply]) -> None:
            for r in replies:
                self._send(account, r.out)
        return emit

    def _send(self, account: str, out: Outbound) -> None:
        """Route a reply or delivery. A reply to a request that reached us through another
        server goes back through that server when no subscription for it is known here yet
        (the requester's interest may still be on its way, on another route)."""
        origin = self._origins.get(out.subject)
        if origin is not None and not self._has_interest(account, out.subject):
            body = msgpack.packb([account, out.subject, out.reply, out.headers, out.data,
                                  getattr(out, "msg_subject", "") or ""], use_bin_type=True)
            if self.routes.send_app(origin, "jsreply", body):
                return
        self.server.route_internal(account, out)

    def _on_reply(self, src: str, body: bytes) -> None:
        """A reply sent back through this server (see :meth:`_send`): deliver it here."""
        try:
            account, subject, reply, headers, data, shown = msgpack.unpackb(body, raw=False)
            out = (Delivery(subject, reply, headers, data, shown) if shown
                   else Outbound(subject, reply, headers, data))
        except Exception as exc:  # noqa: BLE001 - a malformed frame is dropped, never fatal
            self.events.emit("config_warning", message=f"malformed jsreply frame from {src}: {exc}")
            return
        self.server.route_internal(account, out)

    def _remember_origin(self, reply: str | None, origin: str | None) -> None:
        if not reply or not origin or origin == self.server.server_name:
            return
        origins = self._origins
        origins[reply] = origin
        origins.move_to_end(reply)
        while len(origins) > MAX_ORIGINS:
            origins.popitem(last=False)

    def _leader_fn(self, key: tuple[str, str]):
        def on_leader(leader: str | None, term: int) -> None:
            replica = self.replicas.get(key)
            if replica is None:
                return
            mine = leader == self.server.server_name
            replica.is_leader = mine
            self._set_leader_interest(key, mine)
            if leader is not None and replica.pending_reply:
                reply, replica.pending_reply = replica.pending_reply, None
                if mine:
                    self._answer_create(key, reply)
        return on_leader

    def _set_leader_interest(self, key: tuple[str, str], on: bool) -> None:
        account, stream = key
        held = self._interest.pop(key, None)
        if held:  # one batch: a stream's subjects go in a few route frames, not one each
            self.routes.remove_internal_interests(account, held)
        if not on:
            return
        acc = self.service.accounts.get(account)
        entry = acc.streams.get(stream) if acc else None
        if entry is None:
            return
        subjects = [*entry.stream.config.subjects, f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>",
                    *(s.format(stream) for s in _LEADER_API_SUBJECTS)]
        self.routes.add_internal_interests(account, subjects)
        self._interest[key] = subjects

    def _answer_create(self, key: tuple[str, str], reply: str) -> None:
        acc = self.service.accounts[key[0]]
        entry = acc.streams.get(key[1])
        if entry is None:
            return
        body = {"type": E.STREAM_CREATE_RESPONSE, **acc.stream_info(entry, time.time_ns()),
                "did_create": True}
        self._send(key[0], Outbound(reply, None, None, _json_bytes(body)))

    def _answer_existing(self, acc: JetStreamAccount, stream: str, reply: str | None) -> None:
        """STREAM.CREATE of a stream that exists with the same config: its info, without
        ``did_create`` (what a nats-server cluster answers)."""
        entry = acc.streams.get(stream)
        if entry is None:
            self._error(acc.name, reply, E.STREAM_CREATE_RESPONSE, E.cluster_not_available())
            return
        self._respond(acc.name, reply, {"type": E.STREAM_CREATE_RESPONSE,
                                        **acc.stream_info(entry, time.time_ns())})

    def _answer_meta(self, op: str, account: str, stream: str, body: dict[str, Any],
                     reply_account: str | None = None) -> None:
        pending = self._meta_replies.pop((op, account, stream), None)
        if pending is None:
            return
        reply, rtype = pending
        self._respond(reply_account or account, reply, {"type": rtype, **body})

    def _respond(self, account: str, reply: str | None, body: dict[str, Any]) -> None:
        if reply:
            self._send(account, Outbound(reply, None, None, _json_bytes(body)))

    def _error(self, account: str, reply: str | None, rtype: str, err: E.JSApiError) -> None:
        """An error reply with the fields nats-server keeps in its error responses."""
        self._respond(account, reply, {**E.error_response(rtype, err), **_ERROR_EXTRAS.get(rtype, {})})

    # ------------------------------------------------------------------ cluster info

    def _cluster_info_fn(self, account: str):
        def info(stream: str) -> dict[str, Any] | None:
            group = self.groups.get((account, stream))
            if group is None:
                return None
            return self.group_info(group)
        return info

    def group_info(self, group: RaftGroup) -> dict[str, Any]:
        """The ``cluster`` object of stream info (nats-server stream.go ClusterInfo)."""
        now = time.time_ns()
        out: dict[str, Any] = {"name": self.cluster_name, "raft_group": group.name}
        if group.leader:
            out["leader"] = group.leader
        if group.leader_since_ns:
            out["leader_since"] = format_time(group.leader_since_ns)
        # RAFT traffic travels in the system account (nats-server 2.12+ reports it so)
        out["system_account"] = True
        out["traffic_account"] = self.server.config.system_account
        replicas = []
        if group.is_leader:
            for r in group.replicas(now):
                item: dict[str, Any] = {"name": r["name"], "current": bool(r["current"])}
                if r.get("offline"):
                    item["offline"] = True
                item["active"] = int(r.get("active_ns", 0))
                if r.get("lag"):
                    item["lag"] = int(r["lag"])
                item["peer"] = _peer_hash(r["name"])
                replicas.append(item)
        else:   # a follower knows the leader's liveness only (nats-server does the same)
            for name in group.peers:
                if name == self.server.server_name:
                    continue
                seen = group.heard_ns(name)
                current = name == group.leader and seen is not None
                replicas.append({"name": name, "current": current,
                                 "active": max(0, now - seen) if current else 0,
                                 "peer": _peer_hash(name)})
        if replicas:
            out["replicas"] = sorted(replicas, key=lambda r: r["name"])
        return out

    def meta_cluster_info(self) -> dict[str, Any]:
        """nats-server MetaClusterInfo (/jsz ``meta_cluster``): the meta leader and its
        peers (current, active ns, lag, offline) as this server sees them."""
        group = self.meta_group
        if group is None:
            size = self._expected_servers()
            return {"name": self.cluster_name, "cluster_size": size, "quorum_needed": size // 2 + 1,
                    "pending": 0, "pending_requests": 0, "pending_infos": 0}
        info = self.group_info(group)
        out: dict[str, Any] = {"name": self.cluster_name}
        if group.leader:
            out["leader"] = group.leader
            out["peer"] = _peer_hash(group.leader)
        if info.get("replicas"):
            out["replicas"] = info["replicas"]
        out.update({"cluster_size": len(group.peers), "quorum_needed": len(group.peers) // 2 + 1,
                    "pending": 0, "pending_requests": 0, "pending_infos": 0})
        snap = group.log.snapshot()
        out["snapshot"] = {"pending_entries": max(0, group.applied_index - snap.index),
                           "pending_size": 0, "last_time": format_time(self._meta_snapshot_ns)
                           if self._meta_snapshot_ns else "0001-01-01T00:00:00Z"}
        return out

    # ------------------------------------------------------------------ inbound messages

    def handle(self, account: str, subject: str, reply: str | None, headers: bytes | None,
               payload: bytes, *, hops: int = 0, via_meta: bool = False,
               origin: str | None = None, routed: bool = False) -> bool:
        """Give the cluster an inbound message (see JetStreamService.handle). Returns True
        when it was taken (answered now or later)."""
        self._origin = origin
        acc = self.service.accounts.get(account)
        if acc is None:
            if account == self.server.config.system_account and subject.startswith(API_PREFIX):
                return self._system_api(account, subject, reply, headers, payload, hops)
            return False
        if subject.startswith(API_PREFIX):
            try:
                return self._api(acc, subject, reply, headers, payload, hops, via_meta, routed)
            except Exception as exc:  # noqa: BLE001 - one request's failure is answered, never raised
                self._emitter(acc.name)(acc.api_failed(subject, reply, exc))
                return True
        if subject.startswith("$JS.ACK.") or subject.startswith("$JS.FC."):
            stream = _ack_stream(subject)
            key = (account, stream)
            replica, group = self.replicas.get(key), self.groups.get(key)
            if replica is None or group is None or not group.is_leader:
                return False
            now = time.time_ns()
            interest = self._push_interest(acc, stream)
            if subject.startswith("$JS.ACK."):
                data = encode_entry(ACK, replica.next_ts(now), interest, subject, reply, payload)
            else:
                data = encode_entry(FLOW_CONTROL, replica.next_ts(now), interest, subject)
            return self._propose(group, data)
        entry = acc.stream_for(subject)
        if entry is None:
            return False
        key = (account, entry.name)
        replica, group = self.replicas.get(key), self.groups.get(key)
        if replica is None or group is None or not group.is_leader:
            return False
        now = time.time_ns()
        data = encode_entry(PUBLISH, replica.next_ts(now), self._push_interest(acc, entry.name),
                            subject, reply, headers, payload)
        if not self._propose(group, data) and reply:
            self._respond(account, reply, {"error": E.cluster_not_available().to_json(),
                                           "stream": entry.name, "seq": 0})
        return True

    @staticmethod
    def _propose(group: RaftGroup, data: bytes) -> bool:
        try:
            group.propose(data)
            return True
        except (NotLeaderError, ProposalDroppedError):
            return False

    def _on_forwarded_api(self, src: str, body: bytes) -> None:
        try:
            hops, via_meta, account, subject, reply, headers, payload, origin = msgpack.unpackb(
                body, raw=False)
            if not (isinstance(account, str) and isinstance(subject, str) and isinstance(payload, bytes)
                    and isinstance(origin, str)):
                raise ValueError("bad field types")
        except Exception as exc:  # noqa: BLE001 - a malformed frame is dropped, never fatal
            self.events.emit("config_warning", message=f"malformed jsapi frame from {src}: {exc}")
            return
        self._remember_origin(reply, origin)
        self.handle(account, subject, reply, headers, payload, hops=int(hops), via_meta=bool(via_meta),
                    origin=origin)

    def _forward(self, target: str | None, account: str, subject: str, reply: str | None,
                 headers: bytes | None, payload: bytes, hops: int, rtype: str,
                 via_meta: bool = False) -> bool:
        """Send an API request to server ``target`` (route APP frame "jsapi"); answer 10008
        when there is no target, no route to it, or the request went round too often."""
        if target is None or hops >= MAX_HOPS:
            self._error(account, reply, rtype, E.cluster_not_available())
            return True
        if target == self.server.server_name:
            return False
        origin = self._origin or self.server.server_name
        body = msgpack.packb([hops + 1, via_meta, account, subject, reply, headers, payload, origin],
                             use_bin_type=True)
        if not self.routes.send_app(target, "jsapi", body):
            self._error(account, reply, rtype, E.cluster_not_available())
        return True

    # ------------------------------------------------------------------ the API

    def _api(self, acc: JetStreamAccount, subject: str, reply: str | None, headers: bytes | None,
             payload: bytes, hops: int, via_meta: bool = False, routed: bool = False) -> bool:
        tokens = subject.split(".")
        kind = _api_kind(tokens)
        if kind == "STREAM.UPDATE" and not via_meta and len(tokens) == 5:
            return self._meta_api(acc, tokens, kind, subject, reply, headers, payload, hops)
        if kind == "STREAM.CREATE" and via_meta and len(tokens) == 5:
            # the meta leader found the stream exists with this config: its leader answers
            if self._led(acc.name, tokens[4]):
                self._answer_existing(acc, tokens[4], reply)
                return True
            group = self.groups.get((acc.name, tokens[4]))
            return self._forward(group.leader if group else None, acc.name, subject, reply,
                                 headers, payload, hops, E.STREAM_CREATE_RESPONSE, via_meta=True)
        stream = _stream_of(tokens)
        if kind in ("STREAM.CREATE", "STREAM.DELETE", "STREAM.NAMES", "STREAM.LIST",
                    "STREAM.PEER") or subject == "$JS.API.INFO":
            return self._meta_api(acc, tokens, kind, subject, reply, headers, payload, hops)
        if stream is None:
            return acc.handle_api(subject, reply, headers, payload, time.time_ns()) is not None
        if routed and not self._led(acc.name, stream):
            return True     # a meta request seen through stale interest: not ours
        return self._stream_api(acc, stream, tokens, kind, subject, reply, headers, payload, hops,
                                routed=routed)

    def _led(self, account: str, stream: str) -> bool:
        group = self.groups.get((account, stream))
        return group is not None and group.is_leader

    def _meta_leader(self) -> str | None:
        return self.meta_group.leader if self.meta_group is not None else None

    def _stream_api(self, acc: JetStreamAccount, stream: str, tokens: list[str], kind: str,
                    subject: str, reply: str | None, headers: bytes | None, payload: bytes,
                    hops: int, via_meta: bool = False, routed: bool = False) -> bool:
        """A request about one stream. Its leader answers (reads at once, writes once
        replicated). Elsewhere it travels on the leader's subject interest, like the
        publishes and acks before it on the same route, so a pull request never overtakes
        an ack; one that reached a former leader is dropped, as nats-server drops it."""
        key = (acc.name, stream)
        rtype = _response_type(tokens)
        sa = self.meta.streams.get(key)
        if sa is None:
            if kind in ("DIRECT.GET", "CONSUMER.MSG"):
                return False
            leader = self._meta_leader()
            if leader is not None and leader != self.server.server_name:
                # this server may not have applied a just-made assignment yet: only the
                # meta leader says "stream not found" (as in nats-server)
                return self._forward(leader, acc.name, subject, reply, headers, payload, hops,
                                     rtype, via_meta)
            if leader is None:
                self._error(acc.name, reply, rtype, E.cluster_not_available())
            else:
                self._error(acc.name, reply, rtype, E.stream_not_found())
            return True
        group = self.groups.get(key)
        if group is None or not group.is_leader:
            if hops > 0 or via_meta:    # sent here by the meta leader or another server
                target = group.leader if group is not None else self._reachable(sa.peers)
                return self._forward(target, acc.name, subject, reply, headers, payload, hops,
                                     rtype, via_meta)
            if routed:      # our leader interest was stale: the client asks again
                return True
            if self.routes.has_remote_interest(acc.name, subject):
                return False    # the route layer takes it to the leader, behind the acks
            if kind in ("CONSUMER.MSG", "DIRECT.GET"):
                return False    # not a JSON API call: no leader means no-responders
            self._error(acc.name, reply, rtype, E.cluster_not_available())
            return True
        now = time.time_ns()
        if kind == "STREAM.LEADER" or kind == "CONSUMER.LEADER":
            self._step_down(group, "stream" if kind == "STREAM.LEADER" else "consumer",
                            acc.name, reply, rtype)
            return True
        if kind in _STREAM_WRITES:
            if kind == "CONSUMER.MSG" and not acc.knows_consumer(
                    f"$JS.ACK.{tokens[5]}.{tokens[6]}", "$JS.ACK."):
                return False
            if kind in ("CONSUMER.CREATE", "CONSUMER.DURABLE"):
                refusal = acc.consumer_create_refusal(subject, payload)
                if refusal is not None:     # a setting jetraft does not act on: not proposed
                    self._error(acc.name, reply, rtype, refusal)
                    return True
            replica = self.replicas[key]
            pull_inbox = reply if kind == "CONSUMER.MSG" else None
            data = encode_entry(API, replica.next_ts(now), self._push_interest(acc, stream, pull_inbox),
                                subject, reply, headers, payload)
            if not self._propose(group, data):
                self._error(acc.name, reply, rtype, E.cluster_not_available())
            return True
        out = acc.handle_api(subject, reply, headers, payload, now)
        if out is None:
            return False
        self._emitter(acc.name)(out)
        return True

    def _check_update(self, acc: JetStreamAccount, stream: str, payload: bytes) -> E.JSApiError | None:
        """The meta leader's checks of STREAM.UPDATE that need the whole cluster's view
        (replica count, overlap with streams of other peers); the stream's replicas then
        apply the update itself through their log, with every single-server check."""
        try:
            req = decode_request(payload, "StreamConfigRequest") or {}
            new = StreamConfig.decode(req).checked()
            new.check_supported()   # refused before the meta group stores the new config
        except E.JSApiError as err:
            return err
        sa = self.meta.streams.get((acc.name, stream))
        if sa is None:
            return E.stream_not_found()
        if new.num_replicas != StreamConfig.from_json(sa.config).checked().num_replicas:
            return E.stream_replicas_not_updatable()
        try:
            if stream_subjects_overlap(new.subjects, self._account_subjects(acc.name, stream)):
                return E.subjects_overlap()
        except E.JSApiError as err:
            return err
        return None

    def _account_subjects(self, account: str, skip: str | None = None) -> list[str]:
        """The subjects of the account's stream assignments but ``skip``'s (a stream without
        subjects: its name), for one overlap check against them all."""
        out: list[str] = []
        for (acct, name), sa in self.meta.streams.items():
            if acct == account and name != skip:
                out.extend(sa.config.get("subjects") or [name])
        return out

    def _reachable(self, peers: tuple[str, ...]) -> str | None:
        for name in peers:
            if name in self.routes.peers:
                return name
        return None

    def _peer_infos(self) -> list[PeerInfo]:
        me = self.server
        out = [PeerInfo(me.server_name, tuple(me.config.server_tags), True, True, self.cluster_name)]
        online = set()
        removed = self.meta.removed_servers
        # A peer with a route but silent in the meta group past an election timeout (a
        # partition keeps TCP routes open) is offline: placed last, as one gone away.
        now = time.time_ns()
        silent = ({r["name"] for r in self.meta_group.replicas(now) if r["offline"]}
                  if self.meta_group is not None else set())
        for name, peer in self.routes.peers.items():
            online.add(name)
            if name not in removed:
                out.append(PeerInfo(name, tuple(peer.tags), name not in silent, peer.jetstream,
                                    peer.cluster, now if name in silent else None))
        if self.meta_group is not None:
            for name in self.meta_group.peers:
                if name not in online and name != me.server_name and name not in removed:
                    out.append(PeerInfo(name, (), False, True, self.cluster_name))
        return out

    def _meta_api(self, acc: JetStreamAccount, tokens: list[str], kind: str, subject: str,
                  reply: str | None, headers: bytes | None, payload: bytes, hops: int) -> bool:
        rtype = _response_type(tokens)
        if not reply:
            return True
        leader = self._meta_leader()
        if leader != self.server.server_name:
            return self._forward(leader, acc.name, subject, reply, headers, payload, hops, rtype)
        now = time.time_ns()
        try:
            if kind == "STREAM.CREATE":
                return self._create_stream(acc, tokens, subject, reply, headers, payload, hops, now)
            if kind == "STREAM.DELETE":
                if payload.strip():
                    raise E.not_empty_request()
                sa = self.meta.streams.get((acc.name, tokens[4]))
                if sa is None:
                    raise E.stream_not_found()
                self.meta_group.propose(encode_remove_stream(acc.name, tokens[4]))
                self._meta_replies[("delete", acc.name, tokens[4])] = (reply, rtype)
                return True
            if kind == "STREAM.UPDATE":
                err = self._check_update(acc, tokens[4], payload)
                if err is not None:
                    raise err
                new = StreamConfig.decode(decode_request(payload, "StreamConfigRequest") or {}).checked()
                self.meta_group.propose(encode_update_stream(acc.name, tokens[4], new.to_json()))
                return self._stream_api(acc, tokens[4], tokens, kind, subject, reply, headers,
                                        payload, hops, via_meta=True)
            if kind == "STREAM.PEER":
                return self._peer_remove(acc, tokens[5] if len(tokens) > 5 else "", reply, payload, rtype)
            if kind in ("STREAM.NAMES", "STREAM.LIST") or subject == "$JS.API.INFO":
                body = self._meta_read(acc, kind, subject, payload, now)
                self._respond(acc.name, reply, {"type": rtype, **body})
                return True
        except E.JSApiError as err:
            self._error(acc.name, reply, rtype, err)
            return True
        except RaftError:
            self._error(acc.name, reply, rtype, E.cluster_not_available())
            return True
        return False

    def _meta_read(self, acc: JetStreamAccount, kind: str, subject: str, payload: bytes,
                   now: int) -> dict[str, Any]:
        """NAMES, LIST and account INFO from the meta leader: the assignments (with the
        request's ``subject`` filter and ``offset``, as a single server pages them), with
        state from this server's replicas where it holds one. Raises JSApiError for a bad
        request."""
        if subject == "$JS.API.INFO":
            info = acc.account_info(payload, now)
            info["streams"] = sum(1 for (account, _name) in self.meta.streams if account == acc.name)
            return info
        go_type = "JSApiStreamNamesRequest" if kind == "STREAM.NAMES" else "JSApiStreamListRequest"
        req = acc.names_request(payload, go_type, ("offset", "subject"))
        filt = _str_field(req, "subject", go_type)
        offset = max(_int_field(req, "offset", go_type, "int"), 0)
        names = sorted(name for (account, name), sa in self.meta.streams.items()
                       if account == acc.name and (not filt or any(
                           subjects_overlap(filt, s) for s in sa.config.get("subjects") or [name])))
        offset = min(offset, len(names))
        if kind == "STREAM.NAMES":
            page = names[offset:offset + NAMES_LIMIT]
            return {"total": len(names), "offset": offset, "limit": NAMES_LIMIT, "streams": page or None}
        infos = []
        for name in names[offset:offset + LIST_LIMIT]:
            entry = acc.streams.get(name)
            if entry is not None:
                infos.append(acc.stream_info(entry, now, dynamic=False))
            else:       # no replica here: the assigned config, state unknown (zeros)
                sa = self.meta.streams[(acc.name, name)]
                info = StreamInfo(config=StreamConfig.from_json(sa.config).checked(),
                                  created=sa.created_ns, state=StreamState(), ts=now).to_json()
                info["cluster"] = {"name": self.cluster_name}
                infos.append(info)
        return {"total": len(names), "offset": offset, "limit": LIST_LIMIT, "streams": infos}

    def _create_stream(self, acc: JetStreamAccount, tokens: list[str], subject: str, reply: str,
                       headers: bytes | None, payload: bytes, hops: int, now: int) -> bool:
        req = decode_request(payload, "StreamConfigRequest") or {}
        pedantic = bool(req.get("pedantic"))
        cfg = StreamConfig.decode(req)
        cfg.create_request_checks(tokens[4])
        cfg = cfg.checked(pedantic=pedantic).with_static_metadata()
        cfg.check_supported()       # refused before anything is proposed
        key = (acc.name, cfg.name)
        existing = self.meta.streams.get(key)
        if existing is not None:
            if existing.config != cfg.to_json():
                raise E.stream_name_exist()
            group = self.groups.get(key)
            target = group.leader if group is not None else self._reachable(existing.peers)
            if target == self.server.server_name:
                self._answer_existing(acc, cfg.name, reply)
                return True
            return self._forward(target, acc.name, subject, reply, headers, payload, hops,
                                 E.STREAM_CREATE_RESPONSE, via_meta=True)
        if stream_subjects_overlap(cfg.subjects, self._account_subjects(acc.name)):
            raise E.subjects_overlap()
        placement = cfg.placement
        try:
            peers = select_peers(
                self._peer_infos(), cfg.num_replicas, unique_tag=self.unique_tag,
                placement_tags=tuple(getattr(placement, "tags", None) or ()) if placement else (),
                placement_cluster=(getattr(placement, "cluster", None) or None) if placement else None,
                load=self.meta.load())
        except PlacementError as exc:
            self.events.emit("jetstream_placement_failed", account=acc.name, stream=cfg.name,
                             replicas=cfg.num_replicas, reason=str(exc))
            raise E.cluster_no_peers(str(exc)) from None
        sa = StreamAssignment(account=acc.name, name=cfg.name, config=cfg.to_json(),
                              group=group_name("S", acc.name, cfg.name, now, replicas=len(peers),
                                               storage=cfg.storage), peers=tuple(peers),
                              created_ns=now, reply=reply)
        self.meta_group.propose(encode_assign_stream(sa))
        self.events.emit("jetstream_stream_assigned", account=acc.name, stream=cfg.name,
                         group=sa.group, peers=list(sa.peers), replicas=cfg.num_replicas)
        return True

    def _peer_remove(self, acc: JetStreamAccount, stream: str, reply: str, payload: bytes,
                     rtype: str) -> bool:
        req = decode_request(payload, "JSApiStreamRemovePeerRequest") or {}
        peer = req.get("peer") or ""
        if not peer:
            raise E.bad_request()
        sa = self.meta.streams.get((acc.name, stream))
        if sa is None:
            raise E.stream_not_found()
        if peer not in sa.peers:
            raise E.cluster_peer_not_member()
        remaining = tuple(p for p in sa.peers if p != peer)
        try:
            new = self._place(sa, exclude=(peer,), existing=remaining)
        except PlacementError:
            raise E.peer_remap() from None
        added = [p for p in new if p not in remaining]
        replacement = added[0] if added else None
        if replacement is None:
            raise E.peer_remap()
        self.meta_group.propose(encode_replace_stream_peer(acc.name, stream, peer, replacement))
        self._meta_replies[("peer-remove", acc.name, stream)] = (reply, rtype)
        self.events.emit("jetstream_peer_removed", account=acc.name, stream=stream, group=sa.group,
                         peer=peer, replacement=replacement)
        return True

    def _system_api(self, account: str, subject: str, reply: str | None, headers: bytes | None,
                    payload: bytes, hops: int) -> bool:
        """``$JS.API.META.LEADER.STEPDOWN`` and ``$JS.API.SERVER.REMOVE`` from the system
        account (nats-server jetstream_api.go jsLeaderStepDownRequest,
        jsLeaderServerRemoveRequest): answered by the meta leader."""
        if subject not in ("$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE"):
            return False
        remove = subject == "$JS.API.SERVER.REMOVE"
        rtype = E.META_SERVER_REMOVE_RESPONSE if remove else E.META_LEADER_STEPDOWN_RESPONSE
        leader = self._meta_leader()
        if leader != self.server.server_name:
            return self._forward(leader, account, subject, reply, headers, payload, hops, rtype)
        if remove:
            try:
                self._remove_server(account, reply, payload, rtype)
            except E.JSApiError as err:
                self._error(account, reply, rtype, err)
            return True
        self._step_down(self.meta_group, "meta", account, reply, rtype)
        return True

    def _remove_server(self, account: str, reply: str | None, payload: bytes, rtype: str) -> None:
        """SERVER.REMOVE on the meta leader: take the server out of the meta group (a
        configuration change), then record it removed; once that entry is applied every
        stream it held gets a replacement replica (see :meth:`meta_applied`)."""
        req = decode_request(payload, "JSApiMetaServerRemoveRequest") or {}
        name, peer_id = req.get("peer") or "", req.get("peer_id") or ""
        found = next((p for p in self.meta_group.peers
                      if (peer_id and _peer_hash(p) == peer_id) or (not peer_id and p == name)), None)
        if found is None:
            raise E.cluster_server_not_member()
        try:
            if found == self.server.server_name:
                raise E.cluster_member_change_inflight()   # step down first, as nats-server
            self.meta_group.remove_peer(found)
            self.meta_group.propose(encode_remove_server(found))
        except (ProposalDroppedError, ValueError):
            raise E.cluster_member_change_inflight() from None
        except NotLeaderError:
            raise E.cluster_not_available() from None
        self._meta_replies[("server-remove", "", found)] = (reply or "", rtype)
        self._meta_reply_accounts[("server-remove", "", found)] = account
        self.events.emit("jetstream_server_removed", peer=found)

    def _step_down(self, group: RaftGroup, kind: str, account: str, reply: str | None,
                   rtype: str) -> None:
        """Hand ``group``'s leadership to its most up-to-date peer (STEPDOWN requests)."""
        try:
            to = group.step_down()
        except RaftError:
            to = None
        self.events.emit("jetstream_stepdown_requested", group=group.name, kind=kind,
                         leader=self.server.server_name, to=to, cause="api")
        if to is None:
            self._error(account, reply, rtype, E.cluster_not_available())
        else:
            self._respond(account, reply, {"type": rtype, "success": True})

    # ------------------------------------------------------------------ storage failures
    #
    # A RAFT group whose log write or fsync failed, whose log could not be read, or whose
    # replica store failed while applying, is stopped on this server by the RaftHost (it
    # neither votes nor acknowledges; the others go on and elect a leader among themselves)
    # and reported here; so is a replica or the meta group that could not be opened. Every
    # STORAGE_RETRY_S a resume is tried: a probe write and fsync in the group's directory
    # (the RAFT directory for a group not opened), then
    # a log failure: the log rolled back to what is provably on disk and reopened (the
    # replica's state as it was); a replica's store failure: the replica rebuilt from its
    # log (a fresh store, every committed entry applied again); an open failure: opened
    # again. The group then catches up from the leader like any lagging follower.

    def _group_failed(self, group: RaftGroup, exc: BaseException, op: str,
                      entries: list) -> None:
        """RaftHost.on_group_failed: log it, schedule a resume, and refuse the publishes
        this server proposed as leader that its log never made durable (their proposers
        would otherwise wait for an answer that cannot come from here)."""
        key = next((k for k, g in self.groups.items() if g is group), None)
        self._storage_failed(group.name, key, exc, op)
        if key is None or not entries or group.node.role is not Role.LEADER:
            return
        err = storage_api_error(exc).to_json()
        for e in entries:
            if e.type != EntryType.NORMAL or not e.data:
                continue
            try:
                item = decode_entry(e.data)
            except EntryError:
                continue
            if item[0] == PUBLISH and item[4]:
                self._respond(key[0], item[4], {"error": err, "stream": key[1], "seq": 0})

    def _storage_failed(self, group: str, key: tuple[str, str] | None, exc: BaseException,
                        op: str) -> None:
        failure = self.storage_failures.get(group)
        now = trio.current_time()
        if failure is not None:             # failed again while resuming: keep the first
            failure.last_error = exc
            failure.retry_at = now + STORAGE_RETRY_S
            return
        self.storage_failures[group] = StorageFailure(group, key, exc, op, now, now + STORAGE_RETRY_S)
        self.events.emit(
            "jetstream_storage_failed", account=key[0] if key else None,
            stream=key[1] if key else None, consumer=None, group=group, errno=errno_name(exc),
            path=getattr(exc, "path", None) or getattr(exc, "filename", None), op=op,
            error=str(exc) or type(exc).__name__)

    def _storage_resumed(self, failure: StorageFailure) -> None:
        if self.storage_failures.get(failure.group) is failure:
            del self.storage_failures[failure.group]
        key = failure.key
        self.events.emit("jetstream_storage_resumed", account=key[0] if key else None,
                         stream=key[1] if key else None, group=failure.group,
                         frozen_s=round(trio.current_time() - failure.since, 3),
                         attempts=failure.attempts, rolled_back=None)

    async def _retry_storage(self) -> None:
        while True:
            await trio.sleep(STORAGE_RETRY_S / 4)
            now = trio.current_time()
            for name, failure in list(self.storage_failures.items()):
                if failure.retry_at > now or self.storage_failures.get(name) is not failure:
                    continue
                if name == META_GROUP and self.meta_group is None:
                    continue                # the bootstrap loop opens it again
                await self._try_resume(failure)

    async def _try_resume(self, failure: StorageFailure) -> None:
        failure.attempts += 1
        failure.last_error = None
        hosted = self.host.groups.get(failure.group)
        directory = hosted.log.directory if hosted is not None else self.host.logs.root
        try:
            with trio.fail_after(PROBE_TIMEOUT_S):
                await trio.to_thread.run_sync(probe_directory, directory, abandon_on_cancel=True)
            resumed = await self._resume(failure)
            if failure.last_error is not None:
                raise failure.last_error
        except (StorageError, OSError, trio.TooSlowError) as exc:
            failure.retry_at = trio.current_time() + STORAGE_RETRY_S
            key = failure.key
            self.events.emit("jetstream_storage_retry_failed", account=key[0] if key else None,
                             stream=key[1] if key else None, group=failure.group,
                             errno=errno_name(exc), error=str(exc) or type(exc).__name__,
                             retry_in_s=STORAGE_RETRY_S)
            return
        if resumed:
            self._storage_resumed(failure)
        elif self.storage_failures.get(failure.group) is failure:
            del self.storage_failures[failure.group]

    async def _resume(self, failure: StorageFailure) -> bool:
        """One resume attempt (see above); False when there is nothing left to resume (the
        stream was deleted or moved away meanwhile). Storage errors propagate."""
        if failure.group == META_GROUP:
            await self.host.reopen_group_off_loop(META_GROUP)
            self._ensure_assigned_replicas()
            return True
        key = failure.key
        sa = self.meta.streams.get(key) if key is not None else None
        if sa is None or sa.group != failure.group or self.server.server_name not in sa.peers:
            return False
        group = self.groups.get(key)
        if group is None:
            self._ensure_replica(sa, "stream_added")
        elif failure.op == "apply":         # the replica's state is unknown: rebuild it
            self.groups.pop(key, None)
            self.replicas.pop(key, None)
            self._set_leader_interest(key, False)
            self.host.close_group(group.name)
            self._ensure_replica(sa, "stream_added")
        else:
            await self.host.reopen_group_off_loop(failure.group)
            return True
        replica = self.replicas.get(key)
        if replica is not None:
            replica.pending_reply = None    # its create was answered long ago
        return True

    def _ensure_assigned_replicas(self) -> None:
        """After the meta group resumed: a replica for every assignment naming this server,
        none for any other (what applying the meta entries would have left)."""
        me = self.server.server_name
        for key, sa in list(self.meta.streams.items()):
            if me in sa.peers and key not in self.replicas and sa.group not in self.storage_failures:
                self._ensure_replica(sa, "stream_added")
        for key in list(self.replicas):
            sa = self.meta.streams.get(key)
            if sa is None or me not in sa.peers:
                self._drop_replica(key, delete=True)

    # ------------------------------------------------------------------ lame duck

    def leaderships(self) -> list[str]:
        """The RAFT groups this server leads and could hand over (more than one peer)."""
        return [g.name for g in self.host.groups.values() if g.is_leader and len(g.peers) > 1]

    def transfer_all_leadership(self) -> int:
        """Hand every RAFT leadership this server holds to another peer (lame duck mode);
        returns how many transfers were started."""
        n = 0
        for group in list(self.host.groups.values()):
            if group.is_leader and len(group.peers) > 1:
                try:
                    if group.step_down() is not None:
                        n += 1
                        self.events.emit("jetstream_stepdown_requested", group=group.name,
                                         kind="meta" if group.name == META_GROUP else "stream",
                                         leader=self.server.server_name, to=None, cause="lame_duck")
                except RaftError:
                    pass
        return n


class StorageFailure:
    """A group stopped on this server by a storage failure: ``key`` its (account, stream)
    (None for the meta group), ``error`` the first failure and ``op`` what failed,
    ``since``/``retry_at`` trio clock seconds, ``attempts`` resumes tried, ``last_error``
    the failure of the attempt running (None when it has met none)."""

    __slots__ = ("group", "key", "error", "op", "since", "retry_at", "attempts", "last_error")

    def __init__(self, group: str, key: tuple[str, str] | None, error: BaseException, op: str,
                 since: float, retry_at: float) -> None:
        self.group, self.key, self.error, self.op = group, key, error, op
        self.since, self.retry_at = since, retry_at
        self.attempts = 0
        self.last_error: BaseException | None = None


class _MetaMachine:
    """The meta group's StateMachine: applies MetaState entries and acts on the changes."""

    def __init__(self, cluster: ClusterJetStream) -> None:
        self.cluster = cluster

    def apply(self, entries) -> None:
        """Apply a batch to the MetaState, then act on its changes at once: a stream created
        and deleted within one batch (the replay of the meta log at start-up) never gets
        a RAFT group opened, elected and deleted again."""
        from jetraft.raft.types import EntryType
        changes = []
        for e in entries:
            if e.type != EntryType.NORMAL or not e.data:
                continue
            try:
                changes += self.cluster.meta.apply(e.data)
            except Exception as exc:  # noqa: BLE001 - a bad entry is reported and skipped
                self.cluster.events.emit("jetstream_recovery_problem", account="", stream="",
                                         consumer=None, path=META_GROUP,
                                         detail=f"meta entry {e.index} rejected: {exc}")
        if changes:
            self.cluster.meta_applied(changes)

    def snapshot(self) -> bytes:
        self.cluster._meta_snapshot_ns = time.time_ns()
        return self.cluster.meta.snapshot()

    def restore(self, data: bytes) -> None:
        self.cluster.meta_applied(self.cluster.meta.install_snapshot(data))

    def leader_changed(self, leader: str | None, term: int) -> None:
        pass


def _response_type(tokens: list[str]) -> str:
    kind = _api_kind(tokens)
    n = len(tokens)
    table = {
        "STREAM.CREATE": E.STREAM_CREATE_RESPONSE, "STREAM.UPDATE": E.STREAM_UPDATE_RESPONSE,
        "STREAM.DELETE": E.STREAM_DELETE_RESPONSE, "STREAM.INFO": E.STREAM_INFO_RESPONSE,
        "STREAM.NAMES": E.STREAM_NAMES_RESPONSE, "STREAM.LIST": E.STREAM_LIST_RESPONSE,
        "STREAM.PURGE": E.STREAM_PURGE_RESPONSE, "STREAM.PEER": E.STREAM_REMOVE_PEER_RESPONSE,
        "STREAM.LEADER": E.STREAM_LEADER_STEPDOWN_RESPONSE,
        "CONSUMER.CREATE": E.CONSUMER_CREATE_RESPONSE, "CONSUMER.DURABLE": E.CONSUMER_CREATE_RESPONSE,
        "CONSUMER.DELETE": E.CONSUMER_DELETE_RESPONSE, "CONSUMER.INFO": E.CONSUMER_INFO_RESPONSE,
        "CONSUMER.NAMES": E.CONSUMER_NAMES_RESPONSE, "CONSUMER.LIST": E.CONSUMER_LIST_RESPONSE,
        "CONSUMER.LEADER": E.CONSUMER_LEADER_STEPDOWN_RESPONSE,
    }
    if kind in ("STREAM.MSG.GET", "STREAM.MSG.DELETE") and n == 6:
        return E.STREAM_MSG_GET_RESPONSE if tokens[4] == "GET" else E.STREAM_MSG_DELETE_RESPONSE
    if tokens[2:3] == ["INFO"]:
        return E.ACCOUNT_INFO_RESPONSE
    return table.get(kind, E.SYSTEM_RESPONSE)
