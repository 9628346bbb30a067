"""The JetStream cluster controller: every decision of clustered JetStream, with no I/O.

In the shape of the RAFT core (:mod:`jetraft.raft.node`): the controller reads the world
through a :class:`ClusterView` (RAFT groups' leaders and peers, the routes' peers,
subscription interest) and is driven by inputs, each carrying the time where it matters:

- :meth:`ClusterController.handle` - an inbound message: a ``$JS.API`` request, an ack or
  flow-control message, or a publish to a stream's subject;
- :meth:`ClusterController.meta_change` - one change of an applied meta entry;
- :meth:`ClusterController.leader_changed` - a stream group elected a leader (or lost it);
- :meth:`ClusterController.peer_changed` - a route came up or went down;
- :meth:`ClusterController.tick` - time passed (bootstrap, reconciliation, consumer timers);
- :meth:`ClusterController.step_down_done` / :meth:`ClusterController.server_remove_done`
  - the outcome of a :class:`StepDown` / :class:`RemoveServer` action.

Each returns a list of actions (:mod:`jetraft.jetstream.cluster_actions`) for the glue (``net/js_cluster.py``) to carry out, in
order: :class:`Send` a reply or delivery, :class:`Propose` an entry to a RAFT group,
:class:`Forward` a request to another server, :class:`OpenReplica` / :class:`CloseReplica`,
:class:`OpenMeta`, :class:`ChangePeer`, :class:`StepDown`, :class:`RemoveServer`,
:class:`SetInterest` (the stream leader's route interest) and :class:`Emit` an event.

Where nats-server does the same: jetstream_cluster.go (meta group, stream assignments,
placement, peer-remove, SERVER.REMOVE, step-down) and jetstream_api.go (which server answers
which request). The parts:

- **API routing**: requests about one stream and its consumers travel on the stream leader's
  interest in those API subjects (on the same route as the publishes and acks before them,
  so a pull request never overtakes an ack). Stream create/delete/update/list/restore,
  peer-remove, SERVER.REMOVE and meta step-down go to the meta leader (:class:`Forward`); a
  RESTORE is assigned with a restorer there (:class:`StartRestore`), and the stream refuses
  publishes and changes (10194) until its restore is done. Replies travel
  back as ordinary messages to the requester's inbox, or through the server the request came
  from while the inbox's interest has not reached the answering server yet
  (:attr:`Send.via`).
- **Placement** (:mod:`jetraft.jetstream.placement`): replicas on online JetStream servers,
  honouring ``unique_tag`` and placement tags; error 10005 when impossible.
- **Reconciliation**: every stream leader drives its group's membership towards the
  assignment's peers one change at a time, removing before adding.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft.jetstream.api import API_PREFIX, LIST_LIMIT, NAMES_LIMIT, JetStreamAccount, Reply
from jetraft.jetstream.api_subjects import ack_stream, api_kind, peer_hash, response_type, stream_of
from jetraft.jetstream.cluster_actions import (
    ChangePeer,
    CloseMeta,
    CloseReplica,
    ClusterView,
    ToMetaLeader,
    Emit,
    Forward,
    ForwardedRequest,
    GroupView,
    Key,
    OpenMeta,
    OpenReplica,
    Propose,
    Read,
    Refusal,
    RemoveServer,
    RoutePeerView,
    Send,
    SetInterest,
    StepDown,
    decode_forward,
    decode_reply_frame,
    encode_reply_frame,
)
from jetraft.jetstream.meta import (
    MetaChange,
    MetaState,
    StreamAssignment,
    MetaEntryError,
    decode_op,
    encode_add_stream_peer,
    encode_assign_stream,
    encode_clear_vacated,
    encode_member_store,
    encode_remove_server,
    encode_remove_stream,
    encode_replace_stream_peer,
    encode_restore_state,
    entry_stream,
    encode_update_stream,
    group_name,
    replicas_of,
)
from jetraft.jetstream.meta_members import MetaHello, join_peers, membership_step
from jetraft.jetstream.model import StreamConfig, StreamInfo, StreamState
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.placement import PeerInfo, PlacementError, select_peers
from jetraft.jetstream.requests import (
    ERROR_EXTRAS,
    decode_request,
    int_field,
    json_bytes,
    request_info,
    str_field,
)
from jetraft.jetstream.usage import AccountUsage, decode_usage, encode_usage
from jetraft.jetstream.validate import check_stream_create, check_stream_update
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
from jetraft.protocol.subjects import subjects_overlap
from jetraft.raft.types import Entry, EntryType

# The actions and the view live in cluster_actions.py; they are exported here too.
__all__ = [
    "META_GROUP", "ChangePeer", "CloseMeta", "CloseReplica", "ClusterController", "ClusterView", "Emit",
    "Forward", "ForwardedRequest", "GroupView", "Key", "OpenMeta", "OpenReplica", "Propose",
    "Read", "Refusal", "RemoveServer", "RoutePeerView", "Send", "SetInterest", "StartRestore", "StepDown",
    "ToMetaLeader",
    "decode_forward",
    "decode_reply_frame", "encode_reply_frame", "zone_of",
]

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
    backup, build the stream and hand it to the other peers (``net/snapshots.py``,
    ``net/js_cluster.py``)."""

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
    "$JS.API.DIRECT.GET.{}", "$JS.API.DIRECT.GET.{}.>",
    # a snapshot is served by the leader (net/snapshots.py), its chunk acks come back to it
    "$JS.API.STREAM.SNAPSHOT.{}", "$JS.SNAPSHOT.ACK.{}.>",
)

#: API requests about one stream that change it: replicated as an "A" entry.
_STREAM_WRITES = {"STREAM.PURGE", "STREAM.MSG.DELETE", "CONSUMER.CREATE", "CONSUMER.DURABLE",
                  "CONSUMER.DELETE", "CONSUMER.MSG", "STREAM.UPDATE"}

#: API requests about one stream that only read it: its leader answers them once a
#: ReadIndex round confirms it still leads and its state holds every acknowledged write
#: (:class:`~jetraft.jetstream.cluster_actions.Read`).
_STREAM_READS = {"STREAM.INFO", "STREAM.MSG.GET", "CONSUMER.INFO", "CONSUMER.NAMES", "CONSUMER.LIST",
                 "DIRECT.GET"}


def _restore_in_progress() -> E.JSApiError:
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


class ClusterController:
    """Clustered JetStream's decisions on one server (see the module docstring).

    ``server_name``, ``cluster_name``, ``server_tags``, ``unique_tag`` and
    ``system_account`` as configured; ``accounts``: this server's JetStream accounts (created
    ``clustered=True``), by name; ``view``: the world as it is now. ``meta`` is the meta
    group's state (:class:`MetaState`), which the meta group's state machine applies entries
    to; ``override`` the interest a replica sees while it applies an entry.
    """

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

    # ------------------------------------------------------------------ inputs

    def peer_changed(self, name: str, connected: bool, mono_ns: int) -> None:
        """A route to ``name`` came up or went down (monotonic ns): the bootstrap waits
        for the routes to be quiet."""
        self._last_peer_change_ns = mono_ns
        if not connected:
            self.peer_stores.pop(name, None)

    @property
    def fresh(self) -> bool:
        """This server may neither vote in the meta group nor hold a replica: the meta
        state records another store id for it (it lost its store), or it joined as a new
        member whose store id is not recorded yet."""
        recorded = self.meta.stores.get(self.me)
        if recorded is not None:
            return recorded != self.store_id
        return self.join_fresh

    def hello(self, name: str) -> MetaHello | None:
        """What to tell server ``name`` of our meta group (None: no meta group yet)."""
        meta = self.view.meta_group_view()
        if meta is None:
            return MetaHello((), (), None, 0, store=self.store_id)
        return MetaHello(tuple(meta.peers), tuple(meta.learners), meta.leader, meta.term,
                         removed=name in self.meta.removed_servers, store=self.store_id,
                         your_store=self.meta.stores.get(name))

    def meta_hello(self, src: str, hello: MetaHello) -> list[Any]:
        """Server ``src`` told us about its meta group (route APP frame ``"jsmeta"``, see
        :mod:`jetraft.jetstream.meta_members`). Before our meta group is open: remember
        how to join an established group, or that we were removed from it (said once in
        the event log: ``jetstream_meta_refused``)."""
        if hello.store:
            self.peer_stores[src] = hello.store
        meta = self.view.meta_group_view()
        if meta is not None:
            # A server removed while it was down opens its old meta log at start: once an
            # established group's leader says so, it stops acting as a member.
            if hello.removed and hello.established and self.me not in hello.voters \
                    and src == hello.leader and not meta.is_leader:
                self._refuse(src, hello)
                self._out.append(CloseMeta())
            return self._take()
        if hello.removed:
            self._refuse(src, hello)
            return self._take()
        got = join_peers(self.me, self.store_id, hello)
        if got is None and hello.your_store is not None and self._group_exists_by is None:
            # its meta state records our store, so the group committed entries: it is
            # electing a leader (perhaps the one this server was before it lost its store)
            self._group_exists_by = src
        if got is not None and self._join is None:
            self._join, self.join_fresh = got
            self._emit("jetstream_meta_joining", by=src, leader=hello.leader, term=hello.term,
                       voters=list(hello.voters), learners=list(hello.learners),
                       member=not self.join_fresh,
                       store_lost=hello.your_store not in (None, self.store_id))
        return self._take()

    def _refuse(self, src: str, hello: MetaHello) -> None:
        if self._refused_by is None:
            self._refused_by = src
            self._join = None
            self._emit("jetstream_meta_refused", by=src, leader=hello.leader,
                       reason="this server was removed from the meta group "
                              "($JS.API.SERVER.REMOVE); started again with an empty store "
                              "it joins as a new server")

    def tick(self, now_ns: int, mono_ns: int) -> list[Any]:
        """Time passed (``now_ns`` wall clock, ``mono_ns`` monotonic): bootstrap the meta
        group once the routes settled (or join an established one), take the next step of
        the meta group's membership on its leader, drive every led stream group's
        membership towards its assignment and propose a TICK entry where one is due."""
        self._now = now_ns
        self._mono = mono_ns
        if self._last_peer_change_ns is None:
            self._last_peer_change_ns = mono_ns
        meta = self.view.meta_group_view()
        if meta is None:
            self._maybe_bootstrap(mono_ns)
            return self._take()
        if meta.is_leader:
            self._meta_membership(meta, now_ns)
            self._lost_restores(now_ns)
        for key in self.view.replica_keys():
            group = self.view.group(key)
            replica = self.view.replica(key)
            if replica is None or group is None:
                continue
            sa = self.meta.streams.get(key)
            if not group.is_leader:
                if sa is not None and self.me not in sa.peers:
                    self._maybe_leave(key, group, sa)
                continue
            if sa is not None and sa.restore is not None and replica.is_leader \
                    and key not in self.restores:
                self._restore_failed(key)   # asked again until the meta group deletes it
            if sa is not None:
                if sa.restore != "data":    # while the data comes, the group is its restorer
                    self._reconcile_peers(group, sa)
                if sa.vacated:
                    self._report_vacated(group, sa)
            self._maybe_tick(key, replica, group, now_ns, mono_ns)
        return self._take()

    def _lost_restores(self, now_ns: int) -> None:
        """On the meta leader: a stream being restored whose restoring server has had no
        route to this one for :data:`RESTORE_LOST_NS` (since the route went down, or since
        this server started when it never came up) is deleted (the backup was on that
        server alone; its client gets no answer, as from a nats-server whose restoring
        leader went away)."""
        for sa in self.meta.streams.values():
            if sa.restore is None or sa.restored_by in (None, self.me):
                continue
            down = self.view.unreachable_since(sa.restored_by)
            if down is not None and now_ns - down > RESTORE_LOST_NS:
                self._propose_once(encode_remove_stream(sa.account, sa.name))

    def _meta_membership(self, meta: GroupView, now_ns: int) -> None:
        """On the meta leader: the next join, promotion, removal or store record of the
        meta group (:func:`~jetraft.jetstream.meta_members.membership_step`), and replicas
        placed in the slots a server that lost its store left vacant."""
        stores = {n: self.peer_stores.get(n, "") for n, p in self.view.route_peers().items()
                  if p.jetstream}
        stores[self.me] = self.store_id
        for name in (*meta.peers, *meta.learners):     # first sight: all at once
            if stores.get(name) and name not in self.meta.stores:
                self._propose_once(encode_member_store(name, stores[name]))
        step = membership_step(
            voters=meta.peers, learners=meta.learners, candidates=stores,
            removed=self.meta.removed_servers, recorded=self.meta.stores,
            current=lambda name: meta.member_current(name, now_ns))
        if step is not None:
            op, name = step
            if op == "record":
                self._propose_once(encode_member_store(name, stores[name]))
            else:
                self._out.append(ChangePeer(META_GROUP, op, name))
        self._fill_vacancies()

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

    def _report_vacated(self, group: GroupView, sa: StreamAssignment) -> None:
        """On a stream group's leader: a server whose slot was vacated (it lost its store)
        is out of the group and that change is committed: it may hold a replica again."""
        if not group.config_settled:
            return
        for server in sa.vacated:
            if server not in group.peers and server not in group.learners:
                self._propose_once(encode_clear_vacated(sa.account, sa.name, server),
                                   via_leader=True)

    def meta_op(self, src: str, data: bytes) -> list[Any]:
        """On the meta leader: server ``src`` asks for meta entry ``data`` (route APP frame
        ``"jsmetaop"``); only ``clear_vacated`` is taken, anything else is ignored."""
        meta = self.view.meta_group_view()
        if meta is None or not meta.is_leader:
            return []
        try:
            op = decode_op(data)
            if op in ("restore_state", "remove_stream"):
                # from the server restoring the stream, while it restores: its next phase,
                # or the deletion of a restore that failed
                sa = self.meta.streams.get(entry_stream(data))
                if sa is None or sa.restore is None or src not in sa.peers \
                        or (op == "restore_state" and sa.restored_by != src):
                    return []
            elif op != "clear_vacated":
                return []
        except MetaEntryError:
            return []
        self._out.append(Propose(META_GROUP, data))
        return self._take()

    def _fill_vacancies(self, limit: int = 8) -> None:
        """On the meta leader, once a second: streams with fewer peers than their
        ``num_replicas`` (a server that lost its store left them) get a replica placed under
        their placement rules, one per stream and pass, at most ``limit`` per pass. A server whose slot it was is not placed back on
        that stream: its old replica may still be in the stream's RAFT group."""
        if self._mono - self._filled_at < 1_000_000_000:
            return          # once a second: a pass looks at every stream
        self._filled_at = self._mono
        done = 0
        for key, sa in self.meta.streams.items():
            if done >= limit:
                return
            if len(sa.peers) >= replicas_of(sa):
                continue
            try:
                new = self._place(sa, exclude=tuple(sa.vacated), existing=sa.peers,
                                  count=replicas_of(sa))
            except PlacementError as exc:
                if key not in self._fill_failed:
                    self._fill_failed.add(key)
                    self._emit("jetstream_placement_failed", account=sa.account, stream=sa.name,
                               replicas=replicas_of(sa), reason=str(exc))
                continue
            self._fill_failed.discard(key)
            added = [p for p in new if p not in sa.peers]
            if added:
                self._propose_once(encode_add_stream_peer(sa.account, sa.name, added[0]))
                done += 1

    def _maybe_bootstrap(self, mono_ns: int) -> None:
        if self._join is not None:          # an established group told us how to join
            self._out.append(OpenMeta(self._join))
            return
        if self._refused_by is not None:    # removed: stay out until added again
            return
        if self._group_exists_by is not None:  # an established group without a leader yet
            return
        # Every route is up (one of them may be ourselves), then a quiet moment: the seed
        # configuration names every server, and discovery brings the rest meanwhile.
        if not self.view.routes_settled():
            return
        if mono_ns - (self._last_peer_change_ns or mono_ns) < BOOTSTRAP_SETTLE_NS:
            return
        js_peers = sorted(n for n, p in self.view.route_peers().items() if p.jetstream)
        # and every JetStream server connected has said what its meta group is (hellos
        # are sent on connect and repeated): a hello that comes late must not find this
        # server already in a group of its own
        if any(n != self.me and n not in self.peer_stores for n in js_peers):
            return
        self._out.append(OpenMeta(tuple(sorted({self.me, *js_peers}))))

    def _reconcile_peers(self, group: GroupView, sa: StreamAssignment) -> None:
        """On the group's leader, one membership step towards ``sa.peers``: remove an extra
        peer, else add a missing one (one change at a time, thesis §4.1). A leader the
        assignment no longer names hands over before it lets go of its copy (see
        :meth:`_reconcile_leaving`)."""
        want = set(sa.peers)
        have = set(group.peers)
        if self.me not in want:
            self._reconcile_leaving(group, sa)
            return
        extra = sorted(have - want)
        if extra:
            self._out.append(ChangePeer(group.name, "remove", extra[0]))
            return
        missing = sorted(want - have)
        if missing:
            self._out.append(ChangePeer(group.name, "add", missing[0]))

    def _reconcile_leaving(self, group: GroupView, sa: StreamAssignment) -> None:
        """The leader of a group whose assignment no longer names this server (a peer-remove
        of the leader). In order, one step per tick:

        1. another extra peer is removed first (the usual order);
        2. when no other member of the group stays (R1: group {A}, assigned {C}), a missing
           peer is added first: this server holds the only copy;
        3. once a quorum of the members that stay are current (caught up, and not fetching
           a snapshot's messages), the leader proposes its own removal. The change commits
           only once a quorum of the new configuration holds the log up to it; the RAFT core
           then hands leadership to the most up-to-date member with TimeoutNow (thesis
           §4.2.2), whose reconciliation adds the missing peers. This server closes and
           deletes its replica once its configuration no longer names it and it no longer
           leads (:meth:`_maybe_leave`).

        nats-server (jetstream_cluster.go ``removeStream``) has the removed server step down
        if it leads, propose its own removal and delete its copy at once, without waiting
        for either: an R1 stream then starts empty on its new server, and an R2 stream's
        remaining copy may be left without a quorum. jetraft keeps the copy until the
        removal is committed. A step the RAFT group refuses (a change in flight) is asked
        again on the next tick."""
        me = self.me
        want = set(sa.peers)
        if me not in group.peers:
            return      # our removal is appended: the RAFT core steps down once it commits
        others = [p for p in group.peers if p != me]
        extra = sorted(p for p in others if p not in want)
        if extra:
            self._out.append(ChangePeer(group.name, "remove", extra[0]))
            return
        if not others:
            missing = sorted(want - set(group.peers))
            if missing:
                self._out.append(ChangePeer(group.name, "add", missing[0]))
            return
        current = {r["name"] for r in group.replicas(self._now) if r.get("current")}
        if sum(1 for p in others if p in current) >= len(others) // 2 + 1:
            self._out.append(ChangePeer(group.name, "remove", me))

    def _maybe_leave(self, key: Key, group: GroupView | None, sa: StreamAssignment) -> None:
        """A replica of a stream whose assignment no longer names this server: closed and
        deleted when that loses nothing. A leader never lets go (it hands over first, see
        :meth:`_reconcile_leaving`). A follower does when:

        - its group's configuration no longer names it (its removal reached its log; a
          former leader steps down only once that is committed);
        - the other members form a quorum of the configuration without it (R3 and more:
          they commit and elect without it);
        - otherwise (a configuration of two, R2): once a leader this server saw, named in
          the assignment, went silent (no leader known): the leader stops sending to a
          removed peer at once, so until then it may still need this server's
          acknowledgements (a new leader commits an entry of its term before any change).
        """
        if group is None:
            self._leaving.discard(key)
            self._drop_replica(key, delete=True)
            return
        if group.is_leader:
            return
        me = self.me
        peers = group.peers
        others = [p for p in peers if p != me]
        leader = group.leader
        if me in peers and len(others) < len(peers) // 2 + 1:
            if leader is not None and leader != me and leader in sa.peers:
                self._leaving.add(key)
                return
            if leader is not None or key not in self._leaving:
                return
        self._leaving.discard(key)
        self._drop_replica(key, delete=True)

    def _maybe_tick(self, key: Key, replica: StreamReplica, group: GroupView, now: int,
                    mono_ns: int) -> None:
        """Propose a TICK when the leader's push interest changed, a consumer timer is due,
        or (every EXPIRY_CHECK_NS) the stream has a max_age. A tick still in flight may be
        proposed again: applying a poll twice is harmless."""
        acc = self.accounts.get(key[0])
        if acc is None:
            return
        interest = self._push_interest(acc, key[1])
        changed = interest != self._interest_seen.get(key, frozenset())
        deadline = acc.stream_deadline(key[1])
        entry = acc.streams.get(key[1])
        last = self._last_tick.get(key)
        expiry = (entry is not None and entry.stream.config.max_age > 0
                  and (last is None or mono_ns - last >= EXPIRY_CHECK_NS))
        if not changed and not expiry and (deadline is None or deadline > now):
            return
        self._interest_seen[key] = interest
        self._last_tick[key] = mono_ns
        self._out.append(Propose(group.name, encode_entry(TICK, replica.next_ts(now), interest, changed)))

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

    def interest(self, account: str, subject: str) -> bool:
        """Push-consumer interest as a replica must see it: the applying entry's view
        while one is applied, otherwise the cluster's subscriptions."""
        subjects = self.override.subjects
        if subjects is not None:
            return subject in subjects
        return self.view.has_interest(account, subject)

    # ------------------------------------------------------------------ meta changes

    def meta_change(self, change: MetaChange, now_ns: int) -> list[Any]:
        """Act on one change of an applied meta entry (carry out its actions before the
        next change is given). A change to a stream assignment that the MetaState no longer
        holds (deleted, or deleted and created again with another RAFT group, later in the
        same batch) is skipped: its removal follows."""
        self._now = now_ns
        kind = change.kind
        sa = change.assignment
        if kind in ("stream_added", "stream_updated", "stream_peers_changed"):
            self._restore_proposed.pop((sa.account, sa.name), None)
            self._create_proposed.pop((sa.account, sa.name), None)
            self._update_proposed.pop((sa.account, sa.name), None)
            now = self.meta.streams.get((sa.account, sa.name))
            if now is not None and now.group == sa.group and not self.replaying:
                self._ensure_replica(sa, kind, change.old_peers)
        elif kind == "stream_create_repeated":
            self._create_proposed.pop((sa.account, sa.name), None)
            if not self.replaying and sa.reply:
                self._answer_repeated_create(sa)
        elif kind == "stream_removed":
            acc = self.accounts.get(sa.account)
            entry = acc.streams.get(sa.name) if acc is not None else None
            # a follower's replica may not have applied its last consumer deletes yet
            led = entry is not None and self._led(sa.account, sa.name)
            consumers = list(entry.consumers) if led else []
            self._drop_replica((sa.account, sa.name), delete=True, group=sa.group)
            answer = self._meta_answer("delete", sa.account, sa.name, {"success": True})
            if answer and acc is not None:      # the server that answers the delete announces it
                self._out.extend(answer)
                for r in acc.deleted_advisories(sa.name, consumers, now_ns):
                    self._send(sa.account, r.out)
        elif kind == "server_removed":
            self._server_removed(change)
        elif kind == "member_store" and change.server == self.me:
            if self.fresh:
                if not self.replaying:      # a replayed one is history (see end_replay)
                    self._store_replaced()
            elif self.join_fresh or not self._member_said:
                self.join_fresh = False
                self._member_said = True
                self._emit("jetstream_meta_member", store=self.store_id)
                if not self.replaying:                      # replicas now assigned to it
                    assigned = self.ensure_assigned(now_ns)
                    self._out.extend(assigned)
        return self._take()

    def _server_removed(self, change: MetaChange) -> None:
        """A server left for good: answer SERVER.REMOVE, and (meta leader) give each of its
        streams a replacement replica under the same placement rules."""
        if change.assignment is None:
            key = ("server-remove", "", change.server)
            account = self._meta_reply_accounts.pop(key, None)
            if account is not None:
                self._answer_meta("server-remove", "", change.server, {"success": True}, account)
            return
        sa = change.assignment
        if not isinstance(sa, StreamAssignment) or self._meta_leader() != self.me:
            return
        remaining = tuple(p for p in sa.peers if p != change.server)
        try:
            new = self._place(sa, exclude=(change.server,), existing=remaining)
        except PlacementError as exc:
            self._emit("jetstream_placement_failed", account=sa.account, stream=sa.name,
                       replicas=len(sa.peers), reason=str(exc))
            return
        added = [p for p in new if p not in remaining]
        if added:
            self._out.append(Propose(META_GROUP, encode_replace_stream_peer(
                sa.account, sa.name, change.server, added[0])))
            self._emit("jetstream_peer_removed", account=sa.account, stream=sa.name,
                       group=sa.group, peer=change.server, replacement=added[0])

    def _place(self, sa: StreamAssignment, *, exclude: tuple[str, ...] = (),
               existing: tuple[str, ...] = (), count: int | None = None) -> list[str]:
        """Peers for ``sa``'s replicas (``count``, default as many as it has) under its
        placement (PlacementError if impossible)."""
        placement = StreamConfig.from_json(sa.config).placement
        return select_peers(
            self._peer_infos(), len(sa.peers) if count is None else count, unique_tag=self.unique_tag,
            placement_tags=tuple(getattr(placement, "tags", None) or ()) if placement else (),
            exclude=exclude, existing=existing, load=self.meta.load())

    def _ensure_replica(self, sa: StreamAssignment, kind: str,
                        old_peers: tuple[str, ...] = ()) -> None:
        """Open this server's replica of ``sa`` if it names this server and none is open;
        let go of one it no longer names once that loses nothing (:meth:`_maybe_leave`).
        A peer-remove (``stream_peers_changed``, ``old_peers`` the peers before) is answered
        here on the meta leader, once its entry is applied."""
        key = (sa.account, sa.name)
        peers_changed = kind == "stream_peers_changed"
        if self.fresh and self.view.replica(key) is None:
            return          # not a member again yet: no replica (see :attr:`fresh`)
        if self.me not in sa.peers:
            if self.view.replica(key) is not None:
                self._maybe_leave(key, self.view.group(key), sa)
            if peers_changed:
                self._answer_meta("peer-remove", sa.account, sa.name, {"success": True})
            return
        if sa.account not in self.accounts:
            return
        if self.view.replica(key) is not None:
            if peers_changed:
                self._answer_meta("peer-remove", sa.account, sa.name, {"success": True})
            return
        restorer = sa.restored_by
        if sa.restore == "data" and restorer != self.me:
            return      # the data is not there yet: the restorer's group opens alone
        # A replacement joins the group as it was before the change (the former peers but
        # itself: the group of an R1 stream whose only peer is removed is that peer); its
        # log then replays every membership change, each a no-op or a step towards the
        # current peers.
        if peers_changed:
            bootstrap = tuple(p for p in (old_peers or sa.peers) if p != self.me)
        elif sa.restore == "data":
            bootstrap = (self.me,)      # the restorer, alone until its data is in place
        elif restorer is not None and restorer != self.me:
            # a restored stream's other peers are not members until its leader adds them
            # (they take its snapshot): none of them ever elects a leader without the data
            bootstrap = tuple(p for p in sa.peers if p != self.me)
        else:
            bootstrap = tuple(sa.peers)
        campaign = not peers_changed and bool(sa.peers) and sa.peers[0] == self.me
        then = (self._meta_answer("peer-remove", sa.account, sa.name, {"success": True})
                if peers_changed else [])
        self._out.append(OpenReplica(sa, bootstrap, campaign, tuple(then)))

    def _drop_replica(self, key: Key, *, delete: bool, group: str | None = None) -> None:
        self._leaving.discard(key)
        self._set_leader_interest(key, False)
        self._out.append(CloseReplica(key, delete, group))

    def _store_replaced(self) -> None:
        self._emit("jetstream_meta_store_replaced", store=self.meta.stores.get(self.me),
                   mine=self.store_id)

    def end_replay(self, now_ns: int) -> list[Any]:
        """The meta entries committed before this start are applied (:attr:`replaying`
        ends): say once if the state they left records another store for this server (a
        member_store entry met during the replay is history, logged when it was news), and
        open the replicas that state assigns here (:meth:`ensure_assigned`)."""
        self.replaying = False
        if self.fresh and self.meta.stores.get(self.me) is not None:
            self._store_replaced()
        return self._take() + self.ensure_assigned(now_ns)

    def ensure_assigned(self, now_ns: int) -> list[Any]:
        """After the meta group resumed from a storage failure: a replica for every
        assignment naming this server, none for any other (what applying the meta entries
        would have left)."""
        self._now = now_ns
        for key, sa in list(self.meta.streams.items()):
            if (self.me in sa.peers and self.view.replica(key) is None
                    and not self.view.storage_failed(sa.group)):
                self._ensure_replica(sa, "stream_added")
        for key in self.view.replica_keys():
            sa = self.meta.streams.get(key)
            if sa is None:
                self._drop_replica(key, delete=True)
            elif self.me not in sa.peers:
                self._maybe_leave(key, self.view.group(key), sa)
        return self._take()

    def reopen_replica(self, key: Key, now_ns: int) -> list[Any]:
        """The replica of ``key`` is to be rebuilt (its store failed while applying): close
        its group and open it again from its assignment, if this server still holds it
        (the glue closed the old group and forgot the old replica)."""
        self._now = now_ns
        sa = self.meta.streams.get(key)
        if sa is None or self.me not in sa.peers:
            return []
        self._set_leader_interest(key, False)
        self._ensure_replica(sa, "stream_added")
        return self._take()

    # ------------------------------------------------------------------ leadership

    def leader_changed(self, key: Key, leader: str | None, term: int, now_ns: int) -> list[Any]:
        """The group of stream ``key`` elected ``leader`` (None: no leader) in ``term``:
        take or drop the stream's route interest; answer its create once it has a leader."""
        self._now = now_ns
        replica = self.view.replica(key)
        if replica is None:
            return []
        mine = leader == self.me
        replica.is_leader = mine
        self._set_leader_interest(key, mine)
        sa = self.meta.streams.get(key)
        restoring = sa is not None and sa.restore is not None
        if leader is not None and replica.pending_reply:
            reply, replica.pending_reply = replica.pending_reply, None
            if mine and restoring and sa.restore == "data" and sa.restored_by == self.me \
                    and key not in self.restores:
                self.restores.add(key)
                self._out.append(StartRestore(sa, reply))
            elif mine and not restoring:
                self._answer_create(key, reply)
        if mine and restoring and key not in self.restores:
            # this server leads a stream being restored that it does not restore (it
            # restarted meanwhile, or took over from the restorer): the restore failed
            self._restore_failed(key)
        return self._take()

    def restore_failed(self, key: Key) -> list[Any]:
        """The restore of stream ``key`` failed (bad data, its client gone, the restorer
        lost leadership or restarted): have the meta leader delete the stream, so that
        nothing of it is left on any server."""
        self._restore_failed(key)
        return self._take()

    def _restore_failed(self, key: Key) -> None:
        self.restores.discard(key)
        sa = self.meta.streams.get(key)
        if sa is not None and sa.restore is not None:
            self._propose_once(encode_remove_stream(*key), via_leader=True)

    def restore_phase(self, key: Key, phase: str | None) -> list[Any]:
        """The restorer of stream ``key`` moves its restore to ``phase`` ("catchup": its
        data is in its store and RAFT snapshot; None: a quorum of the peers hold it)."""
        sa = self.meta.streams.get(key)
        if sa is not None and sa.restore is not None and sa.restore != phase:
            self._propose_once(encode_restore_state(key[0], key[1], phase), via_leader=True)
        return self._take()

    def restore_limits_check(self, key: Key, restored: int, now_ns: int) -> None:
        """On the restorer of stream ``key``, its backup built into a store of ``restored``
        bytes (one replica), before it is put in place: the account's ``max_mem`` /
        ``max_file`` against what the account's stream assignments reserve and what its
        streams store over the cluster (this server's bytes and the others' last usage
        reports: :mod:`jetraft.jetstream.usage`), as nats-server's stream leader checks a
        restore (stream_backup.go RestoreStreamV2; :meth:`JetStreamAccount.check_restored_limits`).
        ``max_streams`` was held when the meta leader assigned the restore (a stream
        assignment from then on). Raises JSApiError 10028 / 10047 (the caller has the
        stream deleted, see :meth:`restore_failed`), 10062 when the stream's assignment is
        gone."""
        self._now = now_ns
        acc = self.accounts.get(key[0])
        sa = self.meta.streams.get(key)
        if acc is None or sa is None:
            raise E.api_error("JSStreamRestoreErrF", err="the stream was deleted during the restore")
        if not acc.byte_limited():
            return
        cfg = StreamConfig.from_json(sa.config)
        mem, file = acc.usage()
        others_mem, others_file = self.usage.others(key[0], (p for p in self._meta_peers() if p != self.me))
        for other, (memory, size) in self._installing.items():
            if other[0] == key[0] and other != key:
                if memory:
                    mem += size
                else:
                    file += size
        acc.check_restored_limits(cfg, restored, self._stream_configs(key[0], now_ns),
                                  (mem + others_mem, file + others_file))
        self._installing[key] = (cfg.storage == "memory", restored)

    def restore_attached(self, key: Key) -> None:
        """The restore of ``key`` that :meth:`restore_limits_check` admitted is attached
        (its stream's bytes count in the account's usage now) or abandoned."""
        self._installing.pop(key, None)

    def restore_answer(self, key: Key, reply: str, now_ns: int) -> list[Any]:
        """The restore of stream ``key`` is done: its info (at ``now_ns``) answers the
        client's last chunk (``stream_create_response``), and the stream's create advisory
        goes out."""
        self._now = now_ns
        self.restores.discard(key)
        acc = self.accounts.get(key[0])
        entry = acc.streams.get(key[1]) if acc is not None else None
        if entry is None:
            self._error(key[0], reply, E.STREAM_CREATE_RESPONSE, E.stream_not_found())
            return self._take()
        body = {"type": E.STREAM_CREATE_RESPONSE, **acc.stream_info(entry, self._now)}
        self._send(key[0], Outbound(reply, None, None, json_bytes(body)))
        self._stream_advisory(key[0], key[1], "create")
        return self._take()

    def _set_leader_interest(self, key: Key, on: bool) -> None:
        account, stream = key
        held = self._interest.pop(key, None)
        add: tuple[str, ...] = ()
        if on:
            acc = self.accounts.get(account)
            entry = acc.streams.get(stream) if acc else None
            if entry is not None:
                subjects = [*entry.stream.config.subjects, f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>",
                            *(s.format(stream) for s in LEADER_API_SUBJECTS)]
                self._interest[key] = subjects
                add = tuple(subjects)
        if held or add:  # one batch: a stream's subjects go in a few route frames, not one each
            self._out.append(SetInterest(account, add=add, remove=tuple(held or ())))

    def step_down_done(self, action: StepDown, to: str | None, cause: str = "api") -> list[Any]:
        """The outcome of ``action``: ``to`` the peer the leadership goes to, None when it
        could not be handed over (answered 10008)."""
        self._emit("jetstream_stepdown_requested", group=action.group, kind=action.kind,
                   leader=self.me, to=to, cause=cause)
        if to is None:
            self._error(action.account, action.reply, action.rtype, E.cluster_not_available())
        else:
            self._respond(action.account, action.reply, {"type": action.rtype, "success": True})
        return self._take()

    def server_remove_done(self, action: RemoveServer, error: E.JSApiError | None) -> list[Any]:
        """The outcome of ``action``: None when the removal was proposed (answered once it is
        applied), otherwise the error to answer."""
        if error is not None:
            self._error(action.account, action.reply, action.rtype, error)
            return self._take()
        key = ("server-remove", "", action.peer)
        self._meta_replies[key] = (action.reply or "", action.rtype)
        self._meta_reply_accounts[key] = action.account
        self._emit("jetstream_server_removed", peer=action.peer)
        return self._take()

    # ------------------------------------------------------------------ answers

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
            self._send(account, r.out)
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

    def _answer_create(self, key: Key, reply: str) -> None:
        acc = self.accounts[key[0]]
        entry = acc.streams.get(key[1])
        if entry is None:
            return
        body = {"type": E.STREAM_CREATE_RESPONSE, **acc.stream_info(entry, self._now),
                "did_create": True}
        data = json_bytes(body)
        self._send(key[0], Outbound(reply, None, None, data))
        # the new stream's leader answers the create and audits it with the client the
        # assignment names, without the request (nats-server processClusterCreateStream)
        sa = self.meta.streams.get(key)
        for r in acc.audit(f"{API_PREFIX}STREAM.CREATE.{key[1]}", b"", data,
                           sa.client if sa is not None else None, self._now):
            self._send(key[0], r.out)
        self._stream_advisory(key[0], key[1], "create")

    def _stream_advisory(self, account: str, stream: str, action: str) -> None:
        """The ``stream_action`` advisory of ``stream`` (``$JS.EVENT.ADVISORY.STREAM.CREATED``
        / ``DELETED``), sent by the server that answers the request, when someone listens."""
        acc = self.accounts.get(account)
        if acc is not None:
            for r in acc.advise(adv.stream_action, stream, action, self._now):
                self._send(account, r.out)

    def _answer_repeated_create(self, sa: StreamAssignment) -> None:
        """On the meta leader: answer a STREAM.CREATE whose assignment was applied after
        another of the same name (proposed while the first was in flight): as a create of
        an existing stream, its info from its leader when the config is the one assigned,
        else 10058."""
        if self._meta_leader() != self.me:
            return
        current = self.meta.streams.get((sa.account, sa.name))
        acc = self.accounts.get(sa.account)
        if current is None or acc is None:
            return
        if current.config != sa.config:
            self._error(sa.account, sa.reply, E.STREAM_CREATE_RESPONSE, E.stream_name_exist())
            return
        group = self.view.group(current.key)
        target = group.leader if group is not None and group.leader else self._reachable(current.peers)
        if target == self.me:
            self._answer_existing(acc, sa.name, sa.reply)
            return
        self._forward(target, sa.account, f"{API_PREFIX}STREAM.CREATE.{sa.name}", sa.reply, None,
                      json.dumps(sa.config).encode(), 0, E.STREAM_CREATE_RESPONSE, via_meta=True)

    def _answer_existing(self, acc: JetStreamAccount, stream: str, reply: str | None) -> None:
        """STREAM.CREATE of a stream that exists with the same config: its info, without
        ``did_create`` (what a nats-server cluster answers)."""
        entry = acc.streams.get(stream)
        if entry is None:
            self._error(acc.name, reply, E.STREAM_CREATE_RESPONSE, E.cluster_not_available())
            return
        self._respond(acc.name, reply, {"type": E.STREAM_CREATE_RESPONSE,
                                        **acc.stream_info(entry, self._now)})

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
            if item[0] == PUBLISH and item[4]:
                self._respond(key[0], item[4], {"error": err, "stream": key[1], "seq": 0})
        return self._take()

    # ------------------------------------------------------------------ inbound messages

    def handle(self, account: str, subject: str, reply: str | None, headers: bytes | None,
               payload: bytes, now_ns: int, *, hops: int = 0, via_meta: bool = False,
               origin: str | None = None, routed: bool = False) -> tuple[bool, list[Any]]:
        """An inbound message: ``(taken, actions)``. ``taken`` is False when clustered
        JetStream does not answer it here (the route layer or no-responders takes it on).
        ``hops``/``via_meta``/``origin``: a request forwarded by another server;
        ``routed``: it came from another server through route interest. A request whose
        handling raises is answered with an error, never raised (fault isolation)."""
        self._origin = origin
        self._now = now_ns
        acc = self.accounts.get(account)
        if acc is None:
            taken = False
            if account == self.system_account and subject.startswith(API_PREFIX):
                taken = self._system_api(account, subject, reply, headers, payload, hops)
            return taken, self._take()
        if subject.startswith(API_PREFIX):
            try:
                taken = self._api(acc, subject, reply, headers, payload, hops, via_meta, routed)
            except Exception as exc:  # noqa: BLE001 - one request's failure is answered, never raised
                for r in acc.api_failed(subject, reply, exc):
                    self._send(acc.name, r.out)
                taken = True
            return taken, self._take()
        if subject.startswith("$JS.ACK.") or subject.startswith("$JS.FC."):
            return self._ack(acc, subject, reply, payload, now_ns), self._take()
        entry = acc.stream_for(subject)
        if entry is None:
            return False, []
        key = (account, entry.name)
        replica, group = self.view.replica(key), self.view.group(key)
        if replica is None or group is None or not group.is_leader:
            return False, []
        if self._restoring(key):
            if reply:
                self._respond(account, reply, {"error": _restore_in_progress().to_json(),
                                               "stream": entry.name, "seq": 0})
            return True, self._take()
        if acc.byte_limited():
            refusal = acc.publish_limit_refusal(
                entry, subject, headers, payload,
                self.usage.others(account, (p for p in self._meta_peers() if p != self.me)))
            if refusal is not None:
                if reply:
                    self._respond(account, reply, {"error": refusal.to_json(), "stream": entry.name, "seq": 0})
                return True, self._take()
        data = encode_entry(PUBLISH, replica.next_ts(now_ns), self._push_interest(acc, entry.name),
                            subject, reply, headers, payload)
        refused = (Refusal(account, reply, None, entry.name),) if reply else ()
        self._out.append(Propose(group.name, data, refused))
        return True, self._take()

    def _ack(self, acc: JetStreamAccount, subject: str, reply: str | None, payload: bytes,
             now: int) -> bool:
        stream = ack_stream(subject)
        key = (acc.name, stream)
        replica, group = self.view.replica(key), self.view.group(key)
        if replica is None or group is None or not group.is_leader:
            return False
        interest = self._push_interest(acc, stream)
        if subject.startswith("$JS.ACK."):
            data = encode_entry(ACK, replica.next_ts(now), interest, subject, reply, payload)
        else:
            data = encode_entry(FLOW_CONTROL, replica.next_ts(now), interest, subject)
        self._out.append(Propose(group.name, data))
        return True

    # ------------------------------------------------------------------ account usage

    def _meta_peers(self) -> tuple[str, ...]:
        group = self.view.meta_group_view()
        return tuple(group.peers) if group is not None else ()

    def usage_report(self, mono_ns: int) -> bytes | None:
        """This server's ``"jsusage"`` frame when one is due (:mod:`jetraft.jetstream.usage`,
        AccountUsage.due): the stored bytes of each account with a ``max_mem`` or
        ``max_file``; None when none has one or no report is due."""
        usage = {name: acc.usage() for name, acc in self.accounts.items() if acc.byte_limited()}
        if not usage or not self.usage.due(mono_ns, usage):
            return None
        return encode_usage(usage)

    def usage_received(self, src: str, body: bytes) -> list[Any]:
        """Server ``src``'s ``"jsusage"`` frame. A malformed one is reported and dropped."""
        try:
            self.usage.received(src, decode_usage(body, self.accounts))
        except ValueError as exc:
            return [Emit("config_warning", {"message": f"malformed jsusage frame from {src}: {exc}"})]
        return []

    def forwarded(self, src: str, body: bytes, now_ns: int) -> tuple[bool, list[Any]]:
        """A ``"jsapi"`` frame from server ``src``: the request it carries, handled here. A
        malformed frame is reported and dropped."""
        try:
            req = decode_forward(body)
        except Exception as exc:  # noqa: BLE001 - a malformed frame is dropped, never fatal
            return False, [Emit("config_warning", {"message": f"malformed jsapi frame from {src}: {exc}"})]
        self._remember_origin(req.reply, req.origin)
        return self.handle(req.account, req.subject, req.reply, req.headers, req.payload, now_ns,
                           hops=req.hops, via_meta=req.via_meta, origin=req.origin)

    def _forward(self, target: str | None, account: str, subject: str, reply: str | None,
                 headers: bytes | None, payload: bytes, hops: int, rtype: str,
                 via_meta: bool = False) -> bool:
        """Send an API request to server ``target``; answer 10008 when there is no target,
        no route to it, or the request went round too often."""
        if target is None or hops >= MAX_HOPS:
            self._error(account, reply, rtype, E.cluster_not_available())
            return True
        if target == self.me:
            return False
        origin = self._origin or self.me
        frame = ForwardedRequest(hops + 1, via_meta, account, subject, reply, headers, payload,
                                 origin).pack()
        self._out.append(Forward(target, frame,
                                 (Refusal(account, reply, rtype),)))
        return True

    # ------------------------------------------------------------------ the API

    def _api(self, acc: JetStreamAccount, subject: str, reply: str | None, headers: bytes | None,
             payload: bytes, hops: int, via_meta: bool = False, routed: bool = False) -> bool:
        tokens = subject.split(".")
        kind = api_kind(tokens)
        if kind == "STREAM.UPDATE" and not via_meta and len(tokens) == 5:
            return self._meta_api(acc, tokens, kind, subject, reply, headers, payload, hops)
        if kind == "STREAM.CREATE" and via_meta and len(tokens) == 5:
            # the meta leader found the stream exists with this config: its leader answers
            if self._led(acc.name, tokens[4]):
                self._answer_existing(acc, tokens[4], reply)
                return True
            group = self.view.group((acc.name, tokens[4]))
            return self._forward(group.leader if group else None, acc.name, subject, reply,
                                 headers, payload, hops, E.STREAM_CREATE_RESPONSE, via_meta=True)
        stream = stream_of(tokens)
        if kind in ("STREAM.CREATE", "STREAM.DELETE", "STREAM.NAMES", "STREAM.LIST",
                    "STREAM.PEER", "STREAM.RESTORE") or subject == "$JS.API.INFO":
            return self._meta_api(acc, tokens, kind, subject, reply, headers, payload, hops)
        if stream is None:
            out = acc.handle_api(subject, reply, headers, payload, self._now)
            for r in out or ():
                self._send(acc.name, r.out)
            return out is not None
        if routed and not self._led(acc.name, stream):
            return True     # a meta request seen through stale interest: not ours
        return self._stream_api(acc, stream, tokens, kind, subject, reply, headers, payload, hops,
                                routed=routed)

    def _restoring(self, key: Key) -> bool:
        sa = self.meta.streams.get(key)
        return sa is not None and sa.restore is not None

    def _led(self, account: str, stream: str) -> bool:
        group = self.view.group((account, stream))
        return group is not None and group.is_leader

    def _meta_leader(self) -> str | None:
        group = self.view.meta_group_view()
        return group.leader if group is not None else None

    def _stream_api(self, acc: JetStreamAccount, stream: str, tokens: list[str], kind: str,
                    subject: str, reply: str | None, headers: bytes | None, payload: bytes,
                    hops: int, via_meta: bool = False, routed: bool = False) -> bool:
        """A request about one stream. Its leader answers (reads at once, writes once
        replicated). Elsewhere it travels on the leader's subject interest, like the
        publishes and acks before it on the same route, so a pull request never overtakes
        an ack; one that reached a former leader is dropped, as nats-server drops it. A JSON
        API call that reaches a server before the leader's interest does is forwarded to
        the leader (nats-server has no such window: every server receives the request and
        only the leader answers)."""
        key = (acc.name, stream)
        rtype = response_type(tokens)
        sa = self.meta.streams.get(key)
        if sa is None:
            if kind in ("DIRECT.GET", "CONSUMER.MSG"):
                return False
            leader = self._meta_leader()
            if leader is not None and leader != self.me:
                # this server may not have applied a just-made assignment yet: only the
                # meta leader says "stream not found" (as in nats-server)
                return self._forward(leader, acc.name, subject, reply, headers, payload, hops,
                                     rtype, via_meta)
            if leader is None:
                self._error(acc.name, reply, rtype, E.cluster_not_available())
            elif reply:     # "not found" once the meta group confirms it (ReadIndex)
                self._out.append(Read(META_GROUP, acc.name, subject, reply, headers, payload,
                                      (Refusal(acc.name, reply, rtype),)))
            return True
        group = self.view.group(key)
        if group is None or not group.is_leader:
            if hops > 0 or via_meta:    # sent here by the meta leader or another server
                target = group.leader if group is not None else self._reachable(sa.peers)
                return self._forward(target, acc.name, subject, reply, headers, payload, hops,
                                     rtype, via_meta)
            if routed:      # our leader interest was stale: the client asks again
                return True
            if self.view.has_remote_interest(acc.name, subject):
                return False    # the route layer takes it to the leader, behind the acks
            if kind in ("CONSUMER.MSG", "DIRECT.GET"):
                return False    # not a JSON API call: no leader means no-responders
            # the leader's interest has not reached this server yet (a stream created or a
            # leader elected a moment ago): nothing of the stream's can have gone that way
            # before it, so the request goes to the leader this server knows, else to
            # another of the stream's servers (which passes it on once more at most);
            # 10008 only when there is none
            target = (group.leader if group is not None and group.leader else
                      self._reachable(tuple(p for p in sa.peers if p != self.me)))
            if target == self.me:   # this server's replica has not taken up leadership yet
                target = None
            return self._forward(target, acc.name, subject, reply, headers, payload, hops, rtype, via_meta)
        now = self._now
        if self._restoring(key) and (kind in _STREAM_WRITES or kind in (
                "STREAM.LEADER", "CONSUMER.LEADER", "STREAM.UPDATE")):
            if kind != "CONSUMER.MSG":
                self._error(acc.name, reply, rtype, _restore_in_progress())
            return True
        if kind == "STREAM.LEADER" or kind == "CONSUMER.LEADER":
            self._out.append(StepDown(group.name, "stream" if kind == "STREAM.LEADER" else "consumer",
                                      acc.name, reply, rtype))
            return True
        if kind in _STREAM_WRITES:
            if kind == "CONSUMER.MSG" and not acc.knows_consumer(
                    f"$JS.ACK.{tokens[5]}.{tokens[6]}", "$JS.ACK."):
                return False
            if kind in ("CONSUMER.CREATE", "CONSUMER.DURABLE"):
                refusal = acc.consumer_create_refusal(subject, payload) or \
                    acc.consumer_limit_refusal(subject, payload)
                if refusal is not None:     # a setting jetraft does not act on, or the account's limit: not proposed
                    self._error(acc.name, reply, rtype, refusal)
                    return True
            replica = self.view.replica(key)
            pull_inbox = reply if kind == "CONSUMER.MSG" else None
            data = encode_entry(API, replica.next_ts(now), self._push_interest(acc, stream, pull_inbox),
                                subject, reply, headers, payload)
            # A refused pull request is not answered (its client's request expires, as when
            # it reaches a server that is not the leader): a JSON body on the pull inbox
            # would be taken for a stream message.
            refused = () if kind == "CONSUMER.MSG" else (Refusal(acc.name, reply, rtype),)
            self._out.append(Propose(group.name, data, refused))
            return True
        if kind in _STREAM_READS:
            if kind == "DIRECT.GET":
                entry = acc.streams.get(stream)
                if entry is None or not entry.stream.config.allow_direct:
                    return False    # no-responders, as from nats-server
            if not reply:
                return True         # nothing to answer, as nats-server
            # a status or a message answers a direct get: no JSON body when refused
            refused = () if kind == "DIRECT.GET" else (Refusal(acc.name, reply, rtype),)
            self._out.append(Read(group.name, acc.name, subject, reply, headers, payload, refused))
            return True
        out = acc.handle_api(subject, reply, headers, payload, now)
        if out is None:
            return False
        for r in out:
            self._send(acc.name, r.out)
        return True

    def serve_read(self, read: Read, now_ns: int) -> list[Any]:
        """The stream group confirmed ``read`` (see :class:`Read`): answer it from this
        server's state now. A stream gone meanwhile is answered as the account answers it
        (stream not found); a direct get of a stream that no longer allows it, not at all."""
        self._now = now_ns
        acc = self.accounts.get(read.account)
        if acc is None:
            return self._take()
        if read.group == META_GROUP:
            self._serve_meta_read(acc, read, now_ns)
            return self._take()
        for r in acc.handle_api(read.subject, read.reply, read.headers, read.payload, now_ns) or ():
            self._send(acc.name, r.out)
        return self._take()

    def _serve_meta_read(self, acc: JetStreamAccount, read: Read, now: int) -> None:
        """A read the meta group confirmed: NAMES, LIST or account INFO from the
        assignments; a request about a stream that was not assigned when it came is
        "stream not found" if it still is not, and taken up as usual if it now is."""
        tokens = read.subject.split(".")
        kind = api_kind(tokens)
        rtype = response_type(tokens)
        try:
            if kind in ("STREAM.NAMES", "STREAM.LIST") or read.subject == "$JS.API.INFO":
                body = self._meta_read(acc, kind, read.subject, read.payload, now)
                self._respond(acc.name, read.reply, {"type": rtype, **body})
                return
            stream = stream_of(tokens)
            if stream is None or (acc.name, stream) not in self.meta.streams:
                raise E.stream_not_found()
        except E.JSApiError as err:
            self._error(acc.name, read.reply, rtype, err)
            return
        self._stream_api(acc, stream, tokens, kind, read.subject, read.reply, read.headers,
                         read.payload, 0)

    def _check_update(self, acc: JetStreamAccount, stream: str, payload: bytes) -> E.JSApiError | None:
        """The meta leader's checks of STREAM.UPDATE that need the whole cluster's view
        (replica count, overlap with streams of other peers); the stream's replicas then
        apply the update itself through their log, with every single-server check."""
        def current(name: str) -> StreamConfig:
            sa = self.meta.streams.get((acc.name, name))
            if sa is None:
                raise E.stream_not_found()
            return StreamConfig.from_json(sa.config).checked()

        try:
            cfg = check_stream_update(payload, stream, current, self._account_subjects(acc.name, stream),
                                      clustered=True, meta_leader=True)
            acc.check_stream_bytes_limits(cfg)
            acc.check_stream_consumers_limit(cfg)
            if acc.byte_limited():
                acc.check_stream_reservation(cfg, self._stream_configs(acc.name, self._now), create=False)
            self._check_placement_update(self.meta.streams[(acc.name, stream)], cfg)
        except E.JSApiError as err:
            return err
        return None

    def _check_placement_update(self, sa: StreamAssignment, cfg: StreamConfig) -> None:
        """A new ``placement`` is taken when the stream's servers all satisfy it (nothing
        has to move). nats-server moves the stream otherwise (jsClusteredStreamUpdateRequest,
        a move request); jetraft does not move streams, so it refuses the update: 10005 when
        no servers satisfy the placement at all (nats-server's answer then), 10052 when
        others do. Raises JSApiError."""
        def key(placement) -> tuple[str, tuple[str, ...]]:
            return ((placement.cluster or "", tuple(placement.tags or ())) if placement is not None
                    else ("", ()))
        new = key(cfg.placement)
        if new == key(StreamConfig.from_json(sa.config).placement):
            return
        cluster, tags = new
        infos = self._peer_infos()
        ours = [replace(p, online=True) for p in infos if p.name in sa.peers]
        try:        # its own servers, as they are: no unique tag to spread over again
            select_peers(ours, len(sa.peers), placement_tags=tags, placement_cluster=cluster or None)
            return
        except PlacementError:
            pass
        try:
            select_peers(infos, len(sa.peers), unique_tag=self.unique_tag, placement_tags=tags,
                         placement_cluster=cluster or None, load=self.meta.load())
        except PlacementError as exc:
            raise E.cluster_no_peers(str(exc)) from None
        raise E.unsupported_stream_setting(
            f"moving stream {sa.name} off its servers ({', '.join(sa.peers)}) to satisfy a new placement")

    def _account_subjects(self, account: str, skip: str | None = None) -> list[str]:
        """The subjects of the account's stream assignments but ``skip``'s (a stream without
        subjects: its name), for one overlap check against them all."""
        out: list[str] = []
        for (acct, name), sa in self.meta.streams.items():
            if acct == account and name != skip:
                out.extend(sa.config.get("subjects") or [name])
        return out

    def _reachable(self, peers: tuple[str, ...]) -> str | None:
        routes = self.view.route_peers()
        for name in peers:
            if name in routes:
                return name
        return None

    def _peer_infos(self) -> list[PeerInfo]:
        out = [PeerInfo(self.me, self.server_tags, True, True, self.cluster_name)]
        online = set()
        removed = self.meta.removed_servers
        # A peer with a route but silent in the meta group past an election timeout (a
        # partition keeps TCP routes open) is offline: placed last, as one gone away.
        now = self._now
        meta = self.view.meta_group_view()
        silent = self.view.meta_silent(now) if meta is not None else set()
        voters = set(meta.peers) if meta is not None else set()
        for name, peer in self.view.route_peers().items():
            online.add(name)
            # only voters of the meta group hold replicas: a server that is joining (a
            # learner, or no member yet) or was removed is not placed on
            if name not in removed and name in voters:
                out.append(PeerInfo(name, tuple(peer.tags), name not in silent, peer.jetstream,
                                    peer.cluster, now if name in silent else None))
        if meta is not None:
            for name in meta.peers:
                if name not in online and name != self.me and name not in removed:
                    out.append(PeerInfo(name, (), False, True, self.cluster_name))
        return out

    def _meta_api(self, acc: JetStreamAccount, tokens: list[str], kind: str, subject: str,
                  reply: str | None, headers: bytes | None, payload: bytes, hops: int) -> bool:
        rtype = response_type(tokens)
        if not reply:
            return True
        leader = self._meta_leader()
        if leader != self.me:
            return self._forward(leader, acc.name, subject, reply, headers, payload, hops, rtype)
        now = self._now
        if kind != "STREAM.UPDATE":         # an update is answered (and audited) by the stream's leader
            audits = self._meta_audits
            audits[reply] = (acc.name, subject, payload, request_info(headers))
            audits.move_to_end(reply)
            while len(audits) > MAX_META_AUDITS:
                audits.popitem(last=False)
        try:
            if kind == "STREAM.CREATE":
                return self._create_stream(acc, tokens, subject, reply, headers, payload, hops, now)
            if kind == "STREAM.DELETE":
                if payload.strip():
                    raise E.not_empty_request()
                sa = self.meta.streams.get((acc.name, tokens[4]))
                if sa is None:
                    raise E.stream_not_found()
                self._propose_meta(encode_remove_stream(acc.name, tokens[4]), acc.name, reply, rtype)
                self._meta_replies[("delete", acc.name, tokens[4])] = (reply, rtype)
                return True
            if kind == "STREAM.RESTORE":
                return self._restore_stream(acc, tokens[4] if len(tokens) > 4 else "", reply,
                                            payload, now)
            if kind == "STREAM.UPDATE":
                if self._restoring((acc.name, tokens[4])):
                    raise _restore_in_progress()
                err = self._check_update(acc, tokens[4], payload)
                if err is not None:
                    raise err
                new = StreamConfig.decode(decode_request(payload, "StreamConfigRequest") or {}).checked()
                if len(self._update_proposed) > 1024:
                    self._update_proposed.clear()
                self._update_proposed[(acc.name, tokens[4])] = (now, new)
                self._propose_meta(encode_update_stream(acc.name, tokens[4], new.to_json()),
                                   acc.name, reply, rtype)
                return self._stream_api(acc, tokens[4], tokens, kind, subject, reply, headers,
                                        payload, hops, via_meta=True)
            if kind == "STREAM.PEER":
                return self._peer_remove(acc, tokens[5] if len(tokens) > 5 else "", reply, payload, rtype)
            if kind in ("STREAM.NAMES", "STREAM.LIST") or subject == "$JS.API.INFO":
                # answered from the assignments once the meta group confirms this server
                # still leads it with every assignment acknowledged before (ReadIndex)
                self._out.append(Read(META_GROUP, acc.name, subject, reply, headers, payload,
                                      (Refusal(acc.name, reply, rtype),)))
                return True
        except E.JSApiError as err:
            self._error(acc.name, reply, rtype, err)
            return True
        finally:
            if kind in ("STREAM.CREATE", "STREAM.RESTORE"):
                # answered, when it succeeds, by the new stream's leader: no audit waits here
                self._meta_audits.pop(reply, None)
        return False

    def _propose_meta(self, data: bytes, account: str, reply: str | None, rtype: str) -> None:
        """A meta proposal answering a request: refused at once (no longer the meta leader)
        means 10008 and nothing else of the request is done."""
        self._out.append(Propose(META_GROUP, data,
                                 (Refusal(account, reply, rtype),),
                                 abandon=True))

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
        filt = str_field(req, "subject", go_type)
        offset = max(int_field(req, "offset", go_type, "int"), 0)
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
        def existing_config(name: str) -> dict[str, Any] | None:
            sa = self.meta.streams.get((acc.name, name))
            return sa.config if sa is not None else None

        cfg, exists = check_stream_create(payload, tokens[4], self._account_subjects(acc.name),
                                          existing=existing_config, clustered=True)
        key = (acc.name, cfg.name)
        # the account's limits, in nats-server's order (jsClusteredStreamRequest): its
        # checkStreamCfg, then jsClusteredStreamLimitsCheck
        acc.check_stream_bytes_limits(cfg)
        acc.check_stream_count_limits(cfg, self._other_streams(acc.name, cfg.name, now))
        if acc.byte_limited():
            acc.check_stream_reservation(cfg, self._stream_configs(acc.name, now), create=True)
        if exists:
            existing = self.meta.streams[key]
            group = self.view.group(key)
            target = group.leader if group is not None else self._reachable(existing.peers)
            if target == self.me:
                self._answer_existing(acc, cfg.name, reply)
                return True
            return self._forward(target, acc.name, subject, reply, headers, payload, hops,
                                 E.STREAM_CREATE_RESPONSE, via_meta=True)
        inflight = self._create_proposed.get(key)
        if inflight is not None and now - inflight[0] < RESTORE_PROPOSED_NS:
            # the same name proposed a moment ago, not applied yet: the same config gets the
            # same assignment (RAFT group, peers) again with its own reply, another config
            # 10058 (nats-server streamAssignmentOrInflight)
            if inflight[1].to_json() != cfg.to_json():
                raise E.stream_name_exist()
            sa = replace(inflight[2], reply=reply, client=request_info(headers))
            self._propose_meta(encode_assign_stream(sa), acc.name, reply, E.STREAM_CREATE_RESPONSE)
            return True
        placement = cfg.placement
        try:
            peers = select_peers(
                self._peer_infos(), cfg.num_replicas, unique_tag=self.unique_tag,
                placement_tags=tuple(getattr(placement, "tags", None) or ()) if placement else (),
                placement_cluster=(getattr(placement, "cluster", None) or None) if placement else None,
                load=self.meta.load())
        except PlacementError as exc:
            self._emit("jetstream_placement_failed", account=acc.name, stream=cfg.name,
                       replicas=cfg.num_replicas, reason=str(exc))
            raise E.cluster_no_peers(str(exc)) from None
        sa = StreamAssignment(account=acc.name, name=cfg.name, config=cfg.to_json(),
                              group=group_name("S", acc.name, cfg.name, now, replicas=len(peers),
                                               storage=cfg.storage), peers=tuple(peers),
                              created_ns=now, reply=reply, client=request_info(headers))
        if len(self._create_proposed) > 1024:
            self._create_proposed.clear()
        self._create_proposed[key] = (now, cfg, sa)
        self._propose_meta(encode_assign_stream(sa), acc.name, reply, E.STREAM_CREATE_RESPONSE)
        self._emit("jetstream_stream_assigned", account=acc.name, stream=cfg.name,
                   group=sa.group, peers=list(sa.peers), replicas=cfg.num_replicas)
        return True

    def _other_streams(self, account: str, name: str, now: int) -> int:
        """How many streams ``account`` has but ``name``: its assignments and the creates
        and restores this meta leader proposed in the last RESTORE_PROPOSED_NS, not applied
        yet (nats-server counts its in-flight proposals too: streamAssignmentsOrInflightSeq)."""
        names = {n for (a, n) in self.meta.streams if a == account}
        names.update(n for (a, n), (at, _cfg, _sa) in self._create_proposed.items()
                     if a == account and now - at < RESTORE_PROPOSED_NS)
        names.update(n for (a, n), at in self._restore_proposed.items()
                     if a == account and now - at < RESTORE_PROPOSED_NS)
        names.discard(name)
        return len(names)

    def _stream_configs(self, account: str, now: int) -> list[StreamConfig]:
        """The configs of ``account``'s stream assignments, with the creates and updates
        this meta leader proposed in the last RESTORE_PROPOSED_NS and not applied yet (for
        the bytes the account's streams reserve; nats-server counts its in-flight proposals
        too). An update is answered by the stream's leader, which may be before the meta
        group applied it here."""
        out = {n: StreamConfig.from_json(sa.config) for (a, n), sa in self.meta.streams.items()
               if a == account}
        for (a, n), (at, cfg, _sa) in self._create_proposed.items():
            if a == account and n not in out and now - at < RESTORE_PROPOSED_NS:
                out[n] = cfg
        for (a, n), (at, cfg) in self._update_proposed.items():
            if a == account and n in out and now - at < RESTORE_PROPOSED_NS:
                out[n] = cfg
        return list(out.values())

    def _restore_stream(self, acc: JetStreamAccount, stream: str, reply: str, payload: bytes,
                        now: int) -> bool:
        """RESTORE on the meta leader (nats-server jetstream_cluster.go
        jsClusteredStreamRestoreRequest): the request's checks (as on one server, against
        every stream assignment of the account), then the peers are placed and the stream
        assigned with ``restore="data"`` and the first peer as its restorer and preferred
        leader; that peer answers the request with the deliver subject once it leads the
        stream's group (:class:`StartRestore`). A memory stream is refused (10062): its
        RAFT snapshot holds no messages, so its other peers could not take them."""
        rtype = E.STREAM_RESTORE_RESPONSE
        try:
            cfg = acc.restore_check(stream, payload, subjects=self._account_subjects(acc.name),
                                    exists=lambda name: (acc.name, name) in self.meta.streams
                                    or now - self._restore_proposed.get((acc.name, name), -RESTORE_PROPOSED_NS)
                                    < RESTORE_PROPOSED_NS)
            if cfg.storage == "memory":
                raise E.api_error("JSStreamRestoreErrF", err="a memory stream cannot be restored "
                                  "in clustered mode: restore it with file storage")
            acc.check_stream_bytes_limits(cfg)
            acc.check_stream_count_limits(cfg, self._other_streams(acc.name, cfg.name, now))
            if acc.byte_limited():
                acc.check_stream_reservation(cfg, self._stream_configs(acc.name, now), create=True)
            placement = cfg.placement
            try:
                peers = select_peers(
                    self._peer_infos(), cfg.num_replicas, unique_tag=self.unique_tag,
                    placement_tags=tuple(getattr(placement, "tags", None) or ()) if placement else (),
                    placement_cluster=(getattr(placement, "cluster", None) or None) if placement else None,
                    load=self.meta.load())
            except PlacementError as exc:
                self._emit("jetstream_placement_failed", account=acc.name, stream=cfg.name,
                           replicas=cfg.num_replicas, reason=str(exc))
                raise E.cluster_no_peers(str(exc)) from None
        except E.JSApiError as err:
            self._error(acc.name, reply, rtype, err)
            return True
        sa = StreamAssignment(account=acc.name, name=cfg.name, config=cfg.to_json(),
                              group=group_name("S", acc.name, cfg.name, now, replicas=len(peers),
                                               storage=cfg.storage), peers=tuple(peers),
                              created_ns=now, reply=reply, preferred=peers[0], restore="data",
                              restored_by=peers[0])
        if len(self._restore_proposed) > 1024:
            self._restore_proposed.clear()
        self._restore_proposed[sa.key] = now     # a second RESTORE of the name meanwhile: 10130
        self._propose_meta(encode_assign_stream(sa), acc.name, reply, rtype)
        self._emit("jetstream_stream_assigned", account=acc.name, stream=cfg.name,
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
        except PlacementError as exc:
            reason = self._remap_reason(sa, exc)
            self._emit("jetstream_placement_failed", account=acc.name, stream=stream,
                       replicas=len(sa.peers), reason=reason)
            raise E.peer_remap(reason) from None
        added = [p for p in new if p not in remaining]
        replacement = added[0] if added else None
        if replacement is None:
            raise E.peer_remap(self._remap_reason(sa, PlacementError()))
        self._propose_meta(encode_replace_stream_peer(acc.name, stream, peer, replacement),
                           acc.name, reply, rtype)
        self._meta_replies[("peer-remove", acc.name, stream)] = (reply, rtype)
        self._emit("jetstream_peer_removed", account=acc.name, stream=stream, group=sa.group,
                   peer=peer, replacement=replacement)
        return True

    def _remap_reason(self, sa: StreamAssignment, err: PlacementError) -> str:
        """Why no server can replace a peer of ``sa``: the placement error's description
        (nats-server jetstream_cluster.go selectPeerError, errors.json
        JSClusterNoPeersErrF: "no suitable peers for placement, server tag not unique"),
        then what the servers outside the group lack, e.g. ``"no suitable peers for
        placement, server tag not unique (no server outside n1, n3, n5 in a zone the stream
        does not use, unique_tag 'az:')"``."""
        group = ", ".join(sorted(sa.peers))
        spare = [p for p in self._peer_infos() if p.jetstream and p.name not in sa.peers]
        if not spare:
            detail = f"no server outside {group}"
        elif err.unique_tag:
            detail = (f"no server outside {group} in a zone the stream does not use, "
                      f"unique_tag '{self.unique_tag}'")
        elif err.offline and not any(p.online for p in spare):
            detail = f"every server outside {group} is offline"
        else:
            detail = f"no server outside {group} qualifies"
        return f"{err.description} ({detail})"

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
        if leader != self.me:
            return self._forward(leader, account, subject, reply, headers, payload, hops, rtype)
        if remove:
            try:
                self._remove_server(account, reply, payload, rtype)
            except E.JSApiError as err:
                self._error(account, reply, rtype, err)
            return True
        self._out.append(StepDown(META_GROUP, "meta", account, reply, rtype))
        return True

    def _remove_server(self, account: str, reply: str | None, payload: bytes, rtype: str) -> None:
        """SERVER.REMOVE on the meta leader: take the server out of the meta group (a
        configuration change), then record it removed; once that entry is applied every
        stream it held gets a replacement replica (see :meth:`meta_change`)."""
        req = decode_request(payload, "JSApiMetaServerRemoveRequest") or {}
        name, peer_id = req.get("peer") or "", req.get("peer_id") or ""
        meta = self.view.meta_group_view()
        found = next((p for p in meta.peers
                      if (peer_id and peer_hash(p) == peer_id) or (not peer_id and p == name)), None)
        if found is None:
            raise E.cluster_server_not_member()
        if found == self.me:
            raise E.cluster_member_change_inflight()   # step down first, as nats-server
        self._out.append(RemoveServer(found, encode_remove_server(found), account, reply, rtype))
