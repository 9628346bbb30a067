"""The JetStream cluster on trio: the glue between the cluster controller, RAFT and routes.

:class:`ClusterJetStream` runs inside :class:`~jetraft.net.jetstream.service.JetStreamService` when
the server has a ``cluster`` block. Every decision (API routing, placement, meta proposals,
create/update checks, step-down, peer-remove, reconciliation) is the
:class:`~jetraft.jetstream.cluster.ClusterController`'s; this module feeds it inputs (inbound
messages, applied meta entries, leader changes, route changes, ticks with the clock) and
carries out the actions it returns:

- **RAFT** (:class:`~jetraft.net.raft.host.RaftHost`): every group's messages travel in
  route APP frames of kind ``"raft"``; logs live under ``<store_dir>/jetstream/_raft/``.
  The meta group (``_meta_``) spans every JetStream server of the cluster; each server in a
  stream assignment's peers holds a replica
  (:class:`~jetraft.jetstream.replicated.StreamReplica`) and its RAFT group.
- **Routes**: forwarded API requests travel in APP frames ``"jsapi"``, replies sent back
  through the server a request came from in ``"jsreply"``; a stream leader's interest in
  its subjects is internal route interest (nats-server subscribes the stream leader only,
  stream.go subscribeToStream).
- **Storage failures** (below): a RAFT group whose storage failed is stopped on this server
  and resumed when its disk works again.
- **Restores** (:meth:`ClusterJetStream.install_restore`): the restorer of a stream built
  from a backup (``net/jetstream/snapshot.py``) puts it in place of its replica, snapshots its group
  and has the other peers join and take the snapshot; the client is answered once a quorum
  of the peers completed it.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from jetraft.gofmt import format_time
from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft.jetstream import layout
from jetraft.jetstream.api_subjects import peer_hash
from jetraft.jetstream.catchup import StreamSnapshotError
from jetraft.jetstream.cluster import (
    META_GROUP,
    ChangePeer,
    CloseMeta,
    CloseReplica,
    ClusterController,
    Emit,
    Forward,
    Key,
    MetaMachine,
    OpenMeta,
    OpenReplica,
    Propose,
    Read,
    Refusal,
    RemoveServer,
    RoutePeerView,
    Send,
    SetInterest,
    StartRestore,
    StepDown,
    ToMetaLeader,
    decode_reply_frame,
    encode_reply_frame,
    zone_of,
)
from jetraft.jetstream.layout import atomic_write
from jetraft.jetstream.meta_members import decode_hello, encode_hello
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.replicated import TICK, StreamReplica, encode_entry
from jetraft.net.jetstream.durability import (
    PROBE_TIMEOUT_S,
    STORAGE_RETRY_S,
    probe_directory,
    storage_api_error,
)
from jetraft.net.raft.group import SnapshotPolicy
from jetraft.net.raft.host import RaftGroup, RaftHost
from jetraft.net.jetstream.catchup import StreamCatchup
from jetraft.storage import fileio, StorageError
from jetraft.storage.fileio import errno_name
from jetraft.raft.types import (
    NotLeaderError,
    ProposalDroppedError,
    RaftError,
    Role,
)

if TYPE_CHECKING:
    from jetraft.config import JetStreamConfig
    from jetraft.jetstream.api import JetStreamAccount
    from jetraft.jetstream.meta import StreamAssignment
    from jetraft.net.ports import JetStreamHost
    from jetraft.storage import GroupCommit

__all__ = ["META_GROUP", "ClusterJetStream", "ClusterService", "StorageFailure"]


class ClusterService(Protocol):
    """What the cluster needs from the JetStream service it runs in
    (``jetraft.net.jetstream.service.JetStreamService``)."""

    server: JetStreamHost
    config: JetStreamConfig
    #: this server's JetStream accounts (created ``clustered=True``), by name
    accounts: Mapping[str, JetStreamAccount]
    store_dir: str
    #: the group commit the RAFT host's log writes join
    commit: GroupCommit
    #: stream snapshots and restores (``net/jetstream/snapshot.py``): a clustered restore starts there
    transfers: Any

#: Seconds between ticks of the controller (bootstrap, reconciliation, timers of led groups).
RECONCILE_S = 0.1
#: Seconds between two hellos to the same JetStream server.
HELLO_REPEAT_S = 1.0
#: Seconds a server opening its meta group waits to hear from a meta leader before it
#: opens the replicas its own log assigns it (see ClusterJetStream._maybe_end_meta_replay).
META_REPLAY_LEADER_WAIT_S = 10.0
#: How many failed controller passes are reported (each with its traceback) per start.
TICK_FAILURES_REPORTED = 20
#: The file under ``<store_dir>/jetstream`` holding this server's store id.
STORE_ID_FILE = "store_id"
#: The file under ``<store_dir>/jetstream`` that says this server joined as a new member.
JOINING_MARKER = "meta_joining"
#: Seconds between checks of a clustered restore's progress.
RESTORE_POLL_S = 0.05
#: Seconds each step of a clustered restore may take (commit, meta entries).
RESTORE_STEP_S = 30.0
#: Bytes per second a restored stream is copied to its peers at least (the copy step may
#: take ``RESTORE_STEP_S`` plus the backup's size at this rate).
RESTORE_COPY_BPS = 4 << 20


def store_identity(js_dir: str, *, renew: bool = False) -> str:
    """This server's store id: read from ``<store_dir>/jetstream/store_id``, or made (16
    random bytes, hex) and written there durably when the store has none (a new or wiped
    store) or when ``renew`` (its meta group's log is gone: whatever it voted and
    acknowledged is gone with it). Raises OSError when it can be neither read nor written."""
    path = os.path.join(js_dir, STORE_ID_FILE)
    try:
        if renew:
            raise FileNotFoundError(path)
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
        if len(text) == 32 and all(c in "0123456789abcdef" for c in text):
            return text
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        pass        # unreadable or damaged: a new identity (the old one cannot be proven)
    store = os.urandom(16).hex()
    fileio.make_dirs(js_dir)
    atomic_write(path, store.encode() + b"\n")
    return store


class ClusterJetStream:
    """The clustered half of JetStream on one server (see the module docstring).

    ``service``: the server's JetStreamService, whose accounts were created with
    ``clustered=True`` and whose interest functions consult :meth:`interest`.
    ``await nursery.start(cluster.run)`` starts the RAFT host and the tick loop; it returns
    at once (the meta group forms in the background). Implements the controller's
    :class:`~jetraft.jetstream.cluster.ClusterView`.
    """

    def __init__(self, service: ClusterService) -> None:
        self.service = service
        self.server = server = service.server
        self.routes = server.routes
        self.events = server.events
        self.cluster_name = server.config.cluster.name or ""
        self.zone = zone_of(tuple(server.config.server_tags), service.config.unique_tag)
        self.meta_group: RaftGroup | None = None
        self.replicas: dict[Key, StreamReplica] = {}
        #: the streams this server leads, for the QUORUM_LOST advisory
        self._leading: set[Key] = set()
        self.groups: dict[Key, RaftGroup] = {}
        self.meta_snapshot_ns = 0          # when the meta state was last snapshotted
        self._routed = False               # a route came up since start (/healthz)
        self._route_down_ns: dict[str, int] = {}   # peer -> time.time_ns() its route went down
        self._started_ns = time.time_ns()
        js_dir = os.path.join(service.store_dir, "jetstream")
        raft_dir = os.path.join(js_dir, "_raft")
        self._joining_marker = os.path.join(js_dir, JOINING_MARKER)
        self.host = RaftHost(server.server_name, raft_dir, self._send_raft, events=server.events,
                             zone=self.zone, sync=service.commit,
                             flush=server.flush_outbound,
                             pass_follows=lambda: server.in_read)
        # the store id goes with the meta group's log: without it (a new store, or RAFT
        # state lost while other files stayed) this server is a new member
        self.controller = ClusterController(
            server_name=server.server_name, cluster_name=self.cluster_name,
            server_tags=tuple(server.config.server_tags), unique_tag=service.config.unique_tag,
            system_account=server.config.system_account, accounts=service.accounts, view=self,
            store_id=store_identity(js_dir, renew=META_GROUP not in self.host.logs.groups()))
        self.controller.join_fresh = os.path.exists(self._joining_marker)
        self.controller.peer_changed("", True, time.monotonic_ns())
        server.after_read_hooks.append(self.host.pass_now)
        self.routes.on_app("raft", self.host.receive)
        self.routes.on_app("jsapi", self._on_forwarded_api)
        self.routes.on_app("jsreply", self._on_reply)
        self.routes.on_app("jsmeta", self._on_meta_hello)
        self.routes.on_app("jsmetaop", self._on_meta_op)
        self.routes.on_app("jsusage", self._on_usage)
        self._hello_sent: dict[str, float] = {}    # peer -> trio time the leader last told it
        self._tick_failures = 0
        #: the meta index the replay at start-up reaches before replicas open (see
        #: _maybe_end_meta_replay); whether a meta leader was heard since the group opened,
        #: and the trio time after which the replay ends without one
        self.meta_replay_to = 0
        self._replay_leader_seen = False
        self._replay_deadline = 0.0
        self.routes.on_peer_change(self._on_peer_change)
        for acc in service.accounts.values():
            acc.cluster_info = self._cluster_info_fn(acc.name)
        #: RAFT groups stopped on this server by a storage failure, by group name (see
        #: "storage failures" below).
        self.storage_failures: dict[str, StorageFailure] = {}
        self.host.on_group_failed = self._group_failed
        #: Stream snapshots (jetstream { stream_compact* }) and their catch-up.
        self.stream_policy = SnapshotPolicy(
            entries=service.config.stream_compact, bytes=service.config.stream_compact_size,
            interval_ns=service.config.stream_compact_interval_ns)
        #: Stream log segments: a compacted log keeps at most one more than the threshold.
        self.stream_segment = min(64 << 20, max(1 << 20, service.config.stream_compact_size // 2))
        self.catchup = StreamCatchup(self, max_outstanding=service.config.max_outstanding_catchup)

    @property
    def meta(self):
        """The meta group's state (:class:`~jetraft.jetstream.meta.MetaState`)."""
        return self.controller.meta

    # ------------------------------------------------------------------ ClusterView

    def group(self, key: Key) -> RaftGroup | None:
        return self.groups.get(key)

    def replica(self, key: Key) -> StreamReplica | None:
        return self.replicas.get(key)

    def replica_keys(self) -> list[Key]:
        return list(self.groups)

    def meta_group_view(self) -> RaftGroup | None:
        return self.meta_group

    def meta_silent(self, now_ns: int) -> set[str]:
        group = self.meta_group
        if group is None:
            return set()
        return {r["name"] for r in group.replicas(now_ns) if r["offline"]}

    def route_peers(self) -> Mapping[str, RoutePeerView]:
        return self.routes.peers

    def routes_settled(self) -> bool:
        """Every route this server dials (configured or discovered) reached its server,
        or turned out to be ourselves."""
        peers = self.routes.peers
        for target in self.routes.targets():
            if not target.is_self and (target.peer_name is None or target.peer_name not in peers):
                return False
        return True

    def has_interest(self, account: str, subject: str) -> bool:
        match = self.server.account(account).sublist.match(subject)
        return bool(match.plain or match.queues) or self.routes.has_remote_interest(account, subject)

    def has_remote_interest(self, account: str, subject: str) -> bool:
        return self.routes.has_remote_interest(account, subject)

    def leads_stream(self, account: str, stream: str) -> bool:
        """Whether this server's replica of the stream is its group's leader."""
        group = self.controller.view.group((account, stream))
        return group is not None and group.is_leader

    def knows_stream(self, account: str, stream: str) -> bool:
        """Whether the meta group (as this server applied it) assigned the stream."""
        return (account, stream) in self.controller.meta.streams

    def storage_failed(self, group: str) -> bool:
        return group in self.storage_failures

    def routed_since_start(self) -> bool:
        """Whether a route to another server came up since this server started (until
        then the meta layer is recovering: nats-server raft.go waits for routes before it
        signals the end of its replay)."""
        return self._routed

    def route_down_since(self, name: str) -> int | None:
        """Wall-clock ns (time.time_ns) since which the route to server ``name`` is down,
        or None while it is up (or never came up since this server started)."""
        if name in self.routes.peers:
            return None
        return self._route_down_ns.get(name)

    def unreachable_since(self, name: str) -> int | None:
        """Wall-clock ns since which server ``name`` has had no route to this one: since its
        route went down, or since this server started when it never came up; None while
        the route is up."""
        if name in self.routes.peers:
            return None
        return self._route_down_ns.get(name, self._started_ns)

    # ------------------------------------------------------------------ inputs

    def interest(self, account: str, subject: str) -> bool:
        """Push-consumer interest as a replica must see it (the controller's answer)."""
        return self.controller.interest(account, subject)

    def handle(self, account: str, subject: str, reply: str | None, headers: bytes | None,
               payload: bytes, *, routed: bool = False) -> bool:
        """Give the cluster an inbound message (see JetStreamService.handle). Returns True
        when it was taken (answered now or later)."""
        taken, actions = self.controller.handle(account, subject, reply, headers, payload,
                                                time.time_ns(), routed=routed)
        self.execute(actions)
        return taken

    def _send_raft(self, peer: str, payload: bytes) -> bool:
        return self.routes.send_app(peer, "raft", payload)

    def _on_peer_change(self, name: str, connected: bool) -> None:
        if connected:
            self._routed = True
            self._route_down_ns.pop(name, None)
        elif name:
            self._route_down_ns[name] = time.time_ns()
        self.controller.peer_changed(name, connected, time.monotonic_ns())
        if connected:
            self.host.peer_up(name)
            self._send_hello(name)
        else:
            self.host.peer_down(name)
            self._hello_sent.pop(name, None)

    # ------------------------------------------------------------------ meta membership

    def _send_hello(self, name: str) -> None:
        """Tell JetStream server ``name`` what our meta group is, and our store id (route
        APP frame ``"jsmeta"``, :mod:`jetraft.jetstream.meta_members`)."""
        peer = self.routes.peers.get(name)
        hello = self.controller.hello(name)
        if peer is None or not peer.jetstream or hello is None:
            return
        self.routes.send_app(name, "jsmeta", encode_hello(hello))

    def _repeat_hellos(self) -> None:
        """About every :data:`HELLO_REPEAT_S`: tell each JetStream server again what our meta
        group and our store are (a hello lost at connect time, or sent before the peer could
        read it, would otherwise leave a member's store unrecorded, or a new server without
        a way to join). One small frame per peer per interval."""
        now = trio.current_time()
        for name, peer in list(self.routes.peers.items()):
            if peer.jetstream and now - self._hello_sent.get(name, -HELLO_REPEAT_S) >= HELLO_REPEAT_S:
                self._hello_sent[name] = now
                self._send_hello(name)

    def _on_meta_hello(self, src: str, body: bytes) -> None:
        try:
            hello = decode_hello(body)
        except ValueError as exc:
            self.events.emit("route_frame_invalid", peer_name=src, kind="jsmeta", reason=str(exc))
            return
        self.execute(self.controller.meta_hello(src, hello))
        self._sync_joining_marker()

    def _sync_joining_marker(self) -> None:
        """Keep the file that says this server joined as a new member (no vote, no replica
        until its store is recorded) in step with the controller, so a restart in between
        remembers it."""
        want = self.controller.join_fresh
        have = os.path.exists(self._joining_marker)
        try:
            if want and not have:
                atomic_write(self._joining_marker, b"joining\n")
            elif have and not want:
                fileio.unlink(self._joining_marker)
        except OSError as exc:
            self.events.emit("jetstream_storage_failed", group=META_GROUP, op="marker",
                             error=str(exc), path=self._joining_marker)

    def _report_usage(self) -> None:
        """When an account has a ``max_mem`` or ``max_file``: tell each JetStream server
        what this one stores of it, on a change (at most every 250 ms) and every second
        (route APP frame ``"jsusage"``, :mod:`jetraft.jetstream.usage`). One small frame per
        peer per report."""
        frame = self.controller.usage_report(time.monotonic_ns())
        if frame is None:
            return
        for name, peer in list(self.routes.peers.items()):
            if peer.jetstream:
                self.routes.send_app(name, "jsusage", frame)

    def _on_usage(self, src: str, body: bytes) -> None:
        self.execute(self.controller.usage_received(src, body))

    def _on_forwarded_api(self, src: str, body: bytes) -> None:
        _taken, actions = self.controller.forwarded(src, body, time.time_ns())
        self.execute(actions)

    def _on_reply(self, src: str, body: bytes) -> None:
        """A reply sent back through this server (see :class:`Send`): deliver it here."""
        try:
            account, out = decode_reply_frame(body)
        except Exception as exc:  # noqa: BLE001 - a malformed frame is dropped, never fatal
            self.events.emit("config_warning", message=f"malformed jsreply frame from {src}: {exc}")
            return
        self.server.route_internal(account, out)

    # ------------------------------------------------------------------ tasks

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.host.run)
            await nursery.start(self.catchup.run)
            if META_GROUP in self.host.logs.groups():
                self._open_meta(())
            nursery.start_soon(self._tick_loop)
            nursery.start_soon(self._retry_storage)
            task_status.started()

    async def _tick_loop(self) -> None:
        while True:
            await trio.sleep(RECONCILE_S)
            try:
                self.maybe_end_meta_replay()
                self.execute(self.controller.tick(time.time_ns(), time.monotonic_ns()))
                self._repeat_hellos()
                self._report_usage()
            except Exception as exc:  # noqa: BLE001 - one pass fails, the next one runs
                if self._tick_failures < TICK_FAILURES_REPORTED:
                    self._tick_failures += 1
                    self.events.emit("jetstream_cluster_tick_failed", error=repr(exc),
                                     traceback="".join(traceback.format_exception(exc)))

    def _expected_servers(self) -> int:
        """How many servers the configured routes name (ourselves included once)."""
        targets = self.routes.targets()
        others = sum(1 for t in targets if not t.is_self)
        return max(others + 1, len(self.routes.peers) + 1)

    # ------------------------------------------------------------------ actions

    def execute(self, actions: list[Any]) -> None:
        """Carry out the controller's actions, in order."""
        for action in actions:
            kind = type(action)
            if kind is Send:
                self._send(action)
            elif kind is Propose:
                if not self._propose(action):
                    self.execute(list(action.refused))
                    if action.abandon:
                        return
            elif kind is Read:
                self._read(action)
            elif kind is Forward:
                if not self.routes.send_app(action.server, "jsapi", action.frame):
                    self.execute(list(action.unreachable))
            elif kind is SetInterest:
                if action.remove:
                    self.routes.remove_internal_interests(action.account, action.remove)
                if action.add:
                    self.routes.add_internal_interests(action.account, action.add)
            elif kind is Emit:
                self.events.emit(action.event, **action.fields)
            elif kind is OpenReplica:
                self._open_replica(action)
            elif kind is CloseReplica:
                self._close_replica(action.key, delete=action.delete, group_name=action.group)
            elif kind is ChangePeer:
                self._change_peer(action)
            elif kind is StepDown:
                self._step_down(action)
            elif kind is RemoveServer:
                self._remove_server(action)
            elif kind is OpenMeta:
                self._open_meta(action.peers)
            elif kind is CloseMeta:
                self._close_meta()
            elif kind is ToMetaLeader:
                self._to_meta_leader(action.data)
            elif kind is Refusal:
                self.execute(self.controller.refusal(action))
            elif kind is StartRestore:
                acc = self.service.accounts.get(action.assignment.account)
                if acc is not None:
                    self.service.transfers.start_clustered(acc, action.assignment, action.reply)
            else:
                raise TypeError(f"unknown cluster action {action!r}")

    def _send(self, action: Send) -> None:
        if action.via is not None and self.routes.send_app(
                action.via, "jsreply", encode_reply_frame(action.account, action.out)):
            return
        self.server.route_internal(action.account, action.out)

    def _group_named(self, name: str) -> RaftGroup | None:
        if name == META_GROUP:
            return self.meta_group
        return self.host.groups.get(name)

    def _propose(self, action: Propose) -> bool:
        group = self._group_named(action.group)
        if group is None:
            return False
        try:
            group.propose(action.data)
            return True
        except (NotLeaderError, ProposalDroppedError):
            return False
        except (RaftError, StorageError):
            if action.group == META_GROUP:
                return False    # no longer the meta leader: the new one decides
            raise

    def _read(self, action: Read) -> None:
        """Hand ``action`` to its group as a ReadIndex read (RaftGroup.read); the refusal
        at once when the group cannot take it. What serving or refusing it raises is that
        request's failure alone (``api_request_failed``)."""
        group = self._group_named(action.group)

        def isolated(step: Callable[[], list[Any]]) -> Callable[[], None]:
            def run() -> None:
                try:
                    self.execute(step())
                except Exception as exc:  # noqa: BLE001 - one request's failure, not the group's
                    self.events.emit("api_request_failed", account=action.account,
                                     subject=action.subject, error=repr(exc),
                                     traceback="".join(traceback.format_exception(exc)))
            return run

        serve = isolated(lambda: self.controller.serve_read(action, time.time_ns()))
        refuse = isolated(lambda: list(action.refused))
        if group is None:
            refuse()
            return
        try:
            group.read(serve, refuse)
        except (RaftError, StorageError):       # not the leader any more, closed, too many reads waiting
            refuse()

    def _change_peer(self, action: ChangePeer) -> None:
        group = self._group_named(action.group)
        if group is None:
            return
        try:
            if action.op == "step_down":
                group.step_down()
            elif action.op == "remove":
                group.remove_peer(action.peer)
            elif action.op == "add_learner":
                group.add_learner(action.peer)
            elif action.op == "promote":
                group.promote(action.peer)
            else:
                group.add_peer(action.peer)
        except (RaftError, StorageError, ValueError):
            return      # a change is in flight: reconciliation tries again

    def _step_down(self, action: StepDown) -> None:
        """Hand ``group``'s leadership to its most up-to-date peer (STEPDOWN requests)."""
        group = self._group_named(action.group)
        try:
            to = group.step_down() if group is not None else None
        except (RaftError, StorageError):
            to = None
        self.execute(self.controller.step_down_done(action, to))

    def _remove_server(self, action: RemoveServer) -> None:
        """SERVER.REMOVE on the meta leader: take the server out of the meta group (a
        configuration change), then record it removed; once that entry is applied every
        stream it held gets a replacement replica."""
        error: E.JSApiError | None = None
        try:
            self.meta_group.remove_peer(action.peer)
            self.meta_group.propose(action.data)
        except (ProposalDroppedError, ValueError):
            error = E.cluster_member_change_inflight()
        except NotLeaderError:
            error = E.cluster_not_available()
        self.execute(self.controller.server_remove_done(action, error))

    def _open_meta(self, peers: tuple[str, ...]) -> None:
        failure = self.storage_failures.get(META_GROUP)
        if failure is not None and failure.retry_at > trio.current_time():
            return
        machine = MetaMachine(self.meta, on_changes=self.meta_applied,
                              on_batch=self.maybe_end_meta_replay,
                              on_rejected=self._meta_entry_rejected,
                              on_snapshot=self._meta_snapshot_taken,
                              may_vote=lambda: not self.controller.fresh)
        self.controller.replaying = True
        try:
            self.meta_group = self.host.open_group(META_GROUP, peers, machine, policy=SnapshotPolicy(
                entries=self.service.config.meta_compact, bytes=self.service.config.meta_compact_size))
        except (StorageError, OSError) as exc:      # retried by the tick loop
            self.controller.replaying = False
            self._storage_failed(META_GROUP, None, exc, "open")
            return
        # the entries committed before this start are replayed first (see
        # ClusterController.replaying); the replicas are opened once they are
        self.meta_replay_to = self.meta_group.commit_index
        self._replay_leader_seen = False
        self._replay_deadline = trio.current_time() + META_REPLAY_LEADER_WAIT_S
        self.maybe_end_meta_replay()
        if failure is not None:
            self._storage_resumed(failure)
        self.events.emit("jetstream_enabled", store_dir=self.service.store_dir,
                         accounts=sorted(self.service.accounts), sync="raft")

    def maybe_end_meta_replay(self) -> None:
        """End the replay of the meta log at start-up once the meta group applied what the
        cluster had committed: the replicas then open from the state it ended in.

        The commit index this server persisted can lag what it had learned was committed
        (the hard state is not rewritten on every commit; a power cut drops what was not
        fsynced), and a server that was down missed what was committed meanwhile: a replica
        opened from that state could be one of a stream it was removed from, a voter of an
        old configuration, with an empty log when its group was deleted here (Raft §4.1:
        a server must not act in a configuration it has left). So the replay goes on to
        the first commit index the meta leader tells this server that covers an entry of
        the leader's term (or, on the leader, to the end of its log, which its first entry
        commits). A new leader's commit index may itself lag (it learns what earlier leaders
        committed only by committing an entry of its own term, Raft §5.4.2): after a power
        cut of every server the first AppendEntries carried a commit index short of the last
        stream assignments, and the replicas those assignments named had their files
        deleted. Without such a commit index the replay ends only after
        ``META_REPLAY_LEADER_WAIT_S``, and then deletes nothing (a server cut off from the
        meta group's majority still opens its replicas)."""
        group = self.meta_group
        if group is None or not self.controller.replaying:
            return
        if not self._replay_leader_seen:
            if group.is_leader:
                self._replay_leader_seen = True
                self.meta_replay_to = max(self.meta_replay_to, group.node.last_index)
            elif group.leader is not None and group.commit_current:
                self._replay_leader_seen = True
                self.meta_replay_to = max(self.meta_replay_to, group.commit_index)
            elif trio.current_time() < self._replay_deadline:
                return
        if group.applied_index >= self.meta_replay_to:
            self.end_meta_replay()

    def end_meta_replay(self) -> None:
        """The meta group applied what was committed before this start: open the replicas
        the state it ended in assigns to this server."""
        if self.controller.replaying:
            self.execute(self.controller.end_replay(time.time_ns()))
            if self._replay_leader_seen:
                self._delete_unassigned()

    def _to_meta_leader(self, data: bytes) -> None:
        """Propose meta entry ``data`` here when leading the meta group, else ask the
        leader (route APP frame ``"jsmetaop"``); without a leader it is asked again later."""
        group = self.meta_group
        if group is None:
            return
        if group.is_leader:
            self._propose(Propose(META_GROUP, data))
        elif group.leader is not None:
            self.routes.send_app(group.leader, "jsmetaop", data)

    def _on_meta_op(self, src: str, body: bytes) -> None:
        self.execute(self.controller.meta_op(src, body))

    def _close_meta(self) -> None:
        """This server was removed from the meta group (see :class:`CloseMeta`): close every
        stream replica and the meta group, keeping their files."""
        for key in list(self.groups):
            self.catchup.stop(key)
            self.replicas.pop(key, None)
            group = self.groups.pop(key)
            self.host.close_group(group.name)
            acc = self.service.accounts.get(key[0])
            if acc is not None:
                acc.detach_replica(key[1])
        if self.meta_group is not None:
            self.host.close_group(META_GROUP)
            self.meta_group = None

    def _open_replica(self, action: OpenReplica) -> None:
        sa = action.assignment
        key = (sa.account, sa.name)
        acc = self.service.accounts[sa.account]
        try:
            cfg = StreamConfig.from_json(sa.config).checked()
            cfg.check_supported()
        except E.JSApiError as err:
            self.events.emit("jetstream_recovery_problem", account=sa.account, stream=sa.name,
                             consumer=None, path="", detail=f"replica not created: {err}")
            return
        acc.delete_replica(sa.name)         # a replica left behind by an earlier group
        replica = StreamReplica(acc, sa.name, emit=self._emitter(sa.account),
                                override=self.controller.override,
                                on_problem=self._problem_fn(sa), on_leader=self._leader_fn(key),
                                config=sa.config, created_ns=sa.created_ns,
                                on_restore=self.catchup.start)
        self.replicas[key] = replica
        # Followers learn a stream's commit index from the next AppendEntries or heartbeat:
        # one message per publish per follower instead of two (see Config.commit_broadcast).
        # A stored snapshot is restored while the group opens (the catch-up completes it);
        # without one, the stream starts empty and the log is replayed into it.
        try:
            group = self.host.open_group(sa.group, action.bootstrap, replica, commit_broadcast=False,
                                         policy=self.stream_policy, segment_bytes=self.stream_segment)
            replica.start_empty()
        except (StorageError, OSError, StreamSnapshotError) as exc:   # retried ("storage failures")
            self.catchup.stop(key)
            if sa.group in self.host.groups:
                self.host.close_group(sa.group, delete=False)
            self.replicas.pop(key, None)
            acc.detach_replica(sa.name)
            self._storage_failed(sa.group, key, exc, "open")
            return
        self.groups[key] = group
        if action.campaign and group.node.last_index == 0:
            group.campaign()       # a brand-new group: the first peer need not wait a timeout
        self.execute(list(action.then))

    def _close_replica(self, key: Key, *, delete: bool, group_name: str | None = None) -> None:
        self.catchup.stop(key)
        replica = self.replicas.pop(key, None)
        group = self.groups.pop(key, None)
        if group is not None:
            self.host.close_group(group.name, delete=delete)
        acc = self.service.accounts.get(key[0])
        if replica is not None and acc is not None:
            acc.delete_replica(key[1])
            self.events.emit("jetstream_stream_deleted", account=key[0], stream=key[1])
        elif replica is None and group is None and delete:
            self._delete_unopened(key, group_name)

    def _delete_unopened(self, key: Key, group_name: str | None) -> None:
        """Remove the files of a replica found on disk at start-up and never opened since
        (its stream deleted, or this server removed from it, while it was down): its RAFT
        group's log (``group_name``, when known) and its stream directory."""
        if group_name is not None:
            self.host.delete_group_files(group_name)
        acc = self.service.accounts.get(key[0])
        if acc is None or acc.base is None or key in self.replicas:
            return
        sdir = layout.stream_dir(acc.base, key[1])
        if os.path.isdir(sdir):
            fileio.remove_tree(sdir)
            fd = fileio.open_directory(acc.base)
            try:
                fileio.fsync_dir(fd, acc.base)
            finally:
                os.close(fd)
            self.events.emit("jetstream_stream_deleted", account=key[0], stream=key[1])

    def _delete_unassigned(self) -> None:
        """Once the replay at start-up reached the meta leader's commit index: the files of
        every stream replica and RAFT group on disk that the meta state does not assign to
        this server and that is not open go (nats-server removes a stream it finds deleted
        or moved away in the same way, jetstream_cluster.go processStreamRemoval)."""
        me = self.controller.me
        mine = {sa.group: (sa.account, sa.name) for sa in self.controller.meta.streams.values()
                if me in sa.peers}
        others = {sa.group: (sa.account, sa.name) for sa in self.controller.meta.streams.values()
                  if me not in sa.peers}
        keys = set(mine.values())
        for name in self.host.logs.groups():
            if name == META_GROUP or name in mine or name in self.host.groups:
                continue
            if name in others and others[name] in self.replicas:
                continue
            self.host.delete_group_files(name)
        for acc in self.service.accounts.values():
            if acc.base is None or not os.path.isdir(acc.base):
                continue
            for stream in sorted(os.listdir(acc.base)):
                key = (acc.name, stream)
                if key not in keys and key not in self.replicas:
                    self._delete_unopened(key, None)

    def _problem_fn(self, sa: StreamAssignment):
        def problem(detail: str) -> None:
            self.events.emit("jetstream_recovery_problem", account=sa.account, stream=sa.name,
                             consumer=None, path=sa.group, detail=detail)
        return problem

    def _emitter(self, account: str):
        def emit(replies: list) -> None:
            self.execute(self.controller.send_replies(account, replies))
        return emit

    def _leader_fn(self, key: Key):
        def on_leader(leader: str | None, term: int) -> None:
            replica = self.replicas.get(key)
            if leader is not None and replica is not None and replica.holding:
                self.catchup.tell_leader(key)       # before it counts this replica current
            self.execute(self.controller.leader_changed(key, leader, term, time.time_ns()))
            self._leader_advisory(key, leader)
        return on_leader

    def _leader_advisory(self, key: Key, leader: str | None) -> None:
        """nats-server's leader advisories for a stream and its consumers, sent by this
        server in the stream's account and (with ``account`` set) in the system account:
        ``LEADER_ELECTED`` when it became the stream's leader, ``QUORUM_LOST`` when it led
        the stream and the group has no leader now. A consumer is replicated in its
        stream's group, so each consumer of the stream gets its own ``CONSUMER.`` advisory
        with the stream's (nats-server jetstream_cluster.go sendConsumerLeaderElectAdvisory,
        sendConsumerLostQuorumAdvisory). Fault isolation: a failure is reported
        (``advisory_failed``) and the group goes on."""
        account, stream = key
        me = self.server.server_name
        if leader == me:
            self._leading.add(key)
            elected = True
        elif key in self._leading:
            self._leading.discard(key)
            if leader is not None:
                return
            elected = False
        else:
            return
        acc = self.service.accounts.get(account)
        entry = acc.streams.get(stream) if acc is not None else None
        consumers = sorted(entry.consumers) if entry is not None else []
        sends: list[tuple[Any, tuple[Any, ...], str]] = []
        if elected:
            sends.append((adv.stream_leader_elected, (stream, me), adv.stream_subject(adv.stream_leader_elected, stream)))
            sends.extend((adv.consumer_leader_elected, (stream, name, me),
                          f"{adv.ADVISORY_PREFIX}CONSUMER.LEADER_ELECTED.{stream}.{name}") for name in consumers)
        else:
            sends.append((adv.stream_quorum_lost, (stream,), adv.stream_subject(adv.stream_quorum_lost, stream)))
            sends.extend((adv.consumer_quorum_lost, (stream, name),
                          f"{adv.ADVISORY_PREFIX}CONSUMER.QUORUM_LOST.{stream}.{name}") for name in consumers)
        system = self.server.config.system_account
        replicas: list[dict[str, Any]] | None = None
        for build, args, subject in sends:
            targets = [(account, "")] if self.has_interest(account, subject) else []
            if system and system != account and self.has_interest(system, subject):
                targets.append((system, account))
            if not targets:
                continue
            try:
                if replicas is None:
                    group = self.groups.get(key)
                    replicas = list(self.group_info(group).get("replicas") or []) if group is not None else []
                    if elected:                     # nats-server lists the leader too
                        replicas.append({"name": me, "current": True, "active": 0, "peer": peer_hash(me)})
                        replicas.sort(key=lambda r: r["name"])
                domain = self.service.config.domain or ""
                now = time.time_ns()
                for target, named in targets:
                    self.server.route_internal(
                        target, build(*args, replicas, now, account=named, domain=domain))
            except Exception as exc:  # noqa: BLE001 - an advisory never breaks the group
                self.events.emit("advisory_failed", account=account, advisory=build.__name__,
                                 error=repr(exc))

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
                item["peer"] = peer_hash(r["name"])
                replicas.append(item)
        else:   # a follower knows the leader's liveness and which routes are down
            for name in group.peers:
                if name == self.server.server_name:
                    continue
                seen = group.heard_ns(name)
                offline = name not in self.routes.peers or name in self.host.down
                current = name == group.leader and seen is not None and not offline
                item = {"name": name, "current": current,
                        "active": max(0, now - seen) if current else 0, "peer": peer_hash(name)}
                if offline:     # active: since it was last heard or its route went down
                    item["offline"] = True
                    last = max(seen or 0, self.route_down_since(name) or 0)
                    item["active"] = max(0, now - last) if last else 0
                replicas.append(item)
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
            out["peer"] = peer_hash(group.leader)
        if info.get("replicas"):
            out["replicas"] = info["replicas"]
        out.update({"cluster_size": len(group.peers), "quorum_needed": len(group.peers) // 2 + 1,
                    "pending": 0, "pending_requests": 0, "pending_infos": 0})
        snap = group.log.snapshot()
        out["snapshot"] = {"pending_entries": max(0, group.applied_index - snap.index),
                           "pending_size": 0, "last_time": format_time(self.meta_snapshot_ns)
                           if self.meta_snapshot_ns else "0001-01-01T00:00:00Z"}
        return out

    def _meta_entry_rejected(self, index: int, exc: Exception) -> None:
        self.events.emit("jetstream_recovery_problem", account="", stream="", consumer=None,
                         path=META_GROUP, detail=f"meta entry {index} rejected: {exc}")

    def _meta_snapshot_taken(self) -> None:
        self.meta_snapshot_ns = time.time_ns()

    def meta_applied(self, changes: list[Any]) -> None:
        """Give the controller the MetaState's changes, one at a time, each one's actions
        carried out before the next (a later change sees what the earlier ones did)."""
        for change in changes:
            self.execute(self.controller.meta_change(change, time.time_ns()))
        if changes:
            self._sync_joining_marker()

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
        self.execute(self.controller.refuse_unsynced(key, entries, err))

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
            self.execute(self.controller.ensure_assigned(time.time_ns()))
            return True
        key = failure.key
        sa = self.meta.streams.get(key) if key is not None else None
        if sa is None or sa.group != failure.group or self.server.server_name not in sa.peers:
            return False
        group = self.groups.get(key)
        if group is not None and failure.op != "apply":
            await self.host.reopen_group_off_loop(failure.group)
            return True
        if group is not None:               # the replica's state is unknown: rebuild it
            self.groups.pop(key, None)
            self.replicas.pop(key, None)
            self.host.close_group(group.name)
        self.execute(self.controller.reopen_replica(key, time.time_ns()))
        return True

    # ------------------------------------------------------------------ restores

    def hold_interest(self, account: str, subjects: tuple[str, ...], on: bool) -> None:
        """Take (``on``) or drop this server's route interest in ``subjects`` (a restore's
        deliver subject: its chunks reach the restorer from any server)."""
        if on:
            self.routes.add_internal_interests(account, subjects)
        else:
            self.routes.remove_internal_interests(account, subjects)

    def _restoring(self, key: Key, *, ended: bool = False) -> tuple[Any, RaftGroup, StreamReplica]:
        """The assignment, group and replica of stream ``key`` while this server restores
        it (``ended``: or just ended its restore) and leads its group; JSApiError 10062
        otherwise."""
        sa = self.meta.streams.get(key)
        group, replica = self.groups.get(key), self.replicas.get(key)
        if sa is None or (sa.restore is None and not ended) or group is None or replica is None:
            raise E.api_error("JSStreamRestoreErrF", err="the stream was deleted during the restore")
        if not group.is_leader or key not in self.controller.restores:
            raise E.api_error("JSStreamRestoreErrF", err="the stream's leadership moved to "
                              f"{group.leader or 'no server'} during the restore")
        return sa, group, replica

    async def _restore_step(self, key: Key, what: str, done, timeout_s: float, *,
                            ended: bool = False) -> None:
        """Wait (polling, at most ``timeout_s``) until ``done()`` holds, while this server
        still restores ``key`` (see :meth:`_restoring`); JSApiError 10062 naming ``what``
        on a timeout."""
        deadline = trio.current_time() + timeout_s
        while True:
            self._restoring(key, ended=ended)
            if done():
                return
            if trio.current_time() > deadline:
                raise E.api_error("JSStreamRestoreErrF", err=f"{what} took longer than {timeout_s:.0f}s")
            await trio.sleep(RESTORE_POLL_S)

    async def install_restore(self, acc: JetStreamAccount, key: Key, result: Any, built: str,
                              reply: str, size: int) -> None:
        """Put the stream a restore built (``built``: its directory, ``result`` its
        :class:`~jetraft.jetstream.snapshot.RestoreResult`; ``size`` the backup's bytes) in
        place of this server's (empty) replica of ``key``, and have every peer take it:

        1. the built directory replaces the replica's, the store is opened over it and the
           stream's and consumers' state restored (the assignment's config and creation
           time in the backup's place);
        2. one entry is committed and applied, then the group snapshots at it and compacts
           its log (``RaftGroup.snapshot_now``): the store is fsynced, and a peer that
           joins takes the snapshot and fetches the blocks (``net/jetstream/catchup.py``);
        3. the meta group moves the restore to ``"catchup"``: the other peers open their
           replicas, and this leader adds them to its group one at a time;
        4. once the group holds every peer and a quorum of them (this server included)
           completed the snapshot, the meta group ends the restore and ``reply`` is
           answered with the stream's info.

        nats-server does the same with sa.Restore, processStreamRestore and the leader's
        snapshot and catch-up (jetstream_cluster.go). Before step 1 the account's limits are
        checked with the stream's bytes (``result.bytes``: ``restore_limits_check`` of the
        controller). Raises JSApiError 10028 / 10047 when the account's ``max_mem`` /
        ``max_file`` has no room for it, 10062 when the stream's leadership or assignment
        changes meanwhile or a step times out (the caller deletes the stream in every
        case); StorageError/OSError when the store cannot be written."""
        name = key[1]
        sa, group, replica = self._restoring(key)
        self.controller.restore_limits_check(key, result.bytes, time.time_ns())
        try:
            await self._attach_restored(acc, key, built)
        finally:
            self.controller.restore_attached(key)
        sa, group, replica = self._restoring(key)
        state = dict(result.replica)
        state["stream"] = {**(state.get("stream") or {}), "config": sa.config,
                           "created_ns": sa.created_ns}
        try:
            acc.restore_replica_state(name, state, time.time_ns())
        except Exception as exc:  # noqa: BLE001 - a backup whose state does not apply
            raise E.api_error("JSStreamRestoreErrF", err=str(exc)) from None
        # 2: an entry past the last snapshot, then the snapshot at it
        index = group.propose(encode_entry(TICK, replica.next_ts(time.time_ns()), frozenset(), False))
        await self._restore_step(key, "committing the restore",
                                 lambda: group.applied_index >= index, RESTORE_STEP_S)
        group.snapshot_now("restore")
        # 3: the other peers open their replicas; this leader adds them (reconciliation)
        ctl = self.controller

        def phase(want: str | None):
            def done() -> bool:
                now = self.meta.streams.get(key)
                if now is not None and now.restore == want:
                    return True
                self.execute(ctl.restore_phase(key, want))
                return False
            return done

        await self._restore_step(key, "starting the replicas", phase("catchup"), RESTORE_STEP_S)
        need = len(sa.peers) // 2 + 1

        def quorum() -> bool:
            if set(group.peers) != set(sa.peers) or not group.config_settled:
                return False
            current = {r["name"] for r in group.replicas(time.time_ns()) if r.get("current")}
            held = 1 + sum(1 for p in sa.peers if p != self.server.server_name
                           and p in current and p in group.caught_up)
            return held >= need

        await self._restore_step(key, "copying the stream to a quorum of its peers", quorum,
                                 RESTORE_STEP_S + size / RESTORE_COPY_BPS)
        # 4: done; then the answer
        await self._restore_step(key, "ending the restore", phase(None), RESTORE_STEP_S, ended=True)
        entry = acc.streams.get(name)
        st = entry.stream.store.state() if entry is not None else None
        self.events.emit("jetstream_stream_restored", account=key[0], stream=name,
                         group=group.name, peers=list(sa.peers), bytes=size,
                         messages=st.messages if st else 0, last_seq=st.last_seq if st else 0)
        self.execute(ctl.restore_answer(key, reply, time.time_ns()))

    # ------------------------------------------------------------------ lame duck

    async def _attach_restored(self, acc: JetStreamAccount, key: Key, built: str) -> None:
        """Step 1 of :meth:`install_restore`: the built directory in place of the replica's
        (fsynced into its parent), the store opened over it, the stream attached."""
        name = key[1]
        _sa, _group, replica = self._restoring(key)     # raises 10062 when no longer ours
        if acc.base is None:
            raise E.stream_create("jetstream has no store directory")
        sdir = layout.stream_dir(acc.base, name)
        acc.detach_replica(name)

        def swap() -> None:
            fileio.remove_tree(sdir)
            parent = os.path.dirname(sdir)
            fileio.make_dirs(parent)
            fileio.replace(built, sdir)
            fileio.sync_directory(parent)

        store = None
        try:
            await trio.to_thread.run_sync(swap)
            store = await trio.to_thread.run_sync(lambda: acc.open_replica_store(name))
            sa, _group, replica = self._restoring(key)
            acc.create_replica(sa.config, sa.created_ns, keep_files=True, store=store)
        except BaseException:
            # no stream over the restored files: they go, and a replica still open gets
            # its empty stream back (the stream's deletion follows)
            if store is not None:
                store.close()
            with trio.CancelScope(shield=True):     # as large as the restore: off the loop
                await trio.to_thread.run_sync(fileio.remove_tree, sdir)
            if self.replicas.get(key) is replica and acc.streams.get(name) is None:
                replica.start_empty()
            raise

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
                except (RaftError, StorageError):
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
