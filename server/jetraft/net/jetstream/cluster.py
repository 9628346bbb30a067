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
- **Mirrors and sources**: a link's fetch and its answer travel in APP frames ``"jssrc"``
  and ``"jssrcans"`` (:mod:`jetraft.jetstream.cluster.sources`).
- **Routes**: forwarded API requests travel in APP frames ``"jsapi"``, replies sent back
  through the server a request came from in ``"jsreply"``; a stream leader's interest in
  its subjects is internal route interest (nats-server subscribes the stream leader only,
  stream.go subscribeToStream).
- **Storage failures** (``net/jetstream/storage_failures.py``): a RAFT group whose storage
  failed is stopped on this server and resumed when its disk works again.
- **Restores** (:meth:`ClusterJetStream.install_restore`, ``net/jetstream/cluster_restores.py``):
  the restorer of a stream built
  from a backup (``net/jetstream/snapshot.py``) puts it in place of its replica, snapshots its group
  and has the other peers join and take the snapshot; the client is answered once a quorum
  of the peers completed it.

:class:`ClusterJetStream` is one class made of its parts, each a module of ``net/jetstream/``
over the state its ``__init__`` sets up (here, with its inputs, its tasks and lame duck):
:mod:`.cluster_view` (the controller's ClusterView), :mod:`.cluster_actions` (carrying out
the actions), :mod:`.meta_group`, :mod:`.cluster_replicas`, :mod:`.storage_failures`,
:mod:`.cluster_restores` and :mod:`.cluster_info` (stream info's ``cluster``, ``/jsz``'s
meta cluster); the shape of the controller's package (:mod:`jetraft.jetstream.cluster`).
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from jetraft.jetstream.cluster import (
    ANSWER_FRAME,
    FETCH_FRAME,
    META_GROUP,
    ClusterController,
    Key,
    decode_reply_frame,
    zone_of,
)
from jetraft.jetstream.layout import atomic_write
from jetraft.jetstream.replicated import StreamReplica
from jetraft.net.jetstream.catchup import StreamCatchup
from jetraft.net.jetstream.cluster_actions import ActionRunner
from jetraft.net.jetstream.cluster_info import ClusterInfo
from jetraft.net.jetstream.cluster_replicas import ReplicaRunner
from jetraft.net.jetstream.cluster_restores import RestoreInstaller
from jetraft.net.jetstream.cluster_view import ControllerView
from jetraft.net.jetstream.meta_group import MetaGroupRunner
from jetraft.net.jetstream.storage_failures import StorageFailure, StorageFailures
from jetraft.net.raft.group import SnapshotPolicy
from jetraft.net.raft.host import RaftGroup, RaftHost
from jetraft.raft.types import RaftError
from jetraft.storage import fileio, StorageError

# Re-exported: importable from here as before the parts were split out.
from jetraft.net.jetstream.cluster_restores import (  # noqa: F401
    RESTORE_COPY_BPS,
    RESTORE_POLL_S,
    RESTORE_STEP_S,
)
from jetraft.net.jetstream.meta_group import (  # noqa: F401
    HELLO_REPEAT_S,
    META_REPLAY_LEADER_WAIT_S,
)

if TYPE_CHECKING:
    from jetraft.config import JetStreamConfig
    from jetraft.jetstream.api import JetStreamAccount
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
#: How many failed controller passes are reported (each with its traceback) per start.
TICK_FAILURES_REPORTED = 20
#: The file under ``<store_dir>/jetstream`` holding this server's store id.
STORE_ID_FILE = "store_id"
#: The file under ``<store_dir>/jetstream`` that says this server joined as a new member.
JOINING_MARKER = "meta_joining"


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


class ClusterJetStream(ControllerView, ActionRunner, MetaGroupRunner, ReplicaRunner,
                       StorageFailures, RestoreInstaller, ClusterInfo):
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
        self.routes.on_app(FETCH_FRAME, self._on_source_fetch)
        self.routes.on_app(ANSWER_FRAME, self._on_source_answer)
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
        #: ``net/jetstream/storage_failures.py``).
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

    # ------------------------------------------------------------------ route frames

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

    def _on_source_fetch(self, src: str, body: bytes) -> None:
        self.execute(self.controller.source_fetch(src, body, time.time_ns()))

    def _on_source_answer(self, src: str, body: bytes) -> None:
        self.execute(self.controller.source_answer(src, body, time.time_ns()))

    def _on_reply(self, src: str, body: bytes) -> None:
        """A reply sent back through this server (see
        :class:`~jetraft.jetstream.cluster.Send`): deliver it here."""
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
                except (RaftError, StorageError):
                    pass
        return n

