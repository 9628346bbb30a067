"""The meta group on one server of a JetStream cluster: opened (with its state machine,
:class:`~jetraft.jetstream.cluster.MetaMachine`) and closed, the replay of its log at
start-up before the replicas open, meta entries proposed here or sent to the meta leader
(route APP frame ``"jsmetaop"``), the hellos that tell every JetStream server what our meta
group and store are (``"jsmeta"``, :mod:`jetraft.jetstream.meta_members`), and the applied
entries' changes handed to the controller.

The decisions are the controller's (:mod:`jetraft.jetstream.cluster.meta_group`); where
nats-server does the same: jetstream_cluster.go (the meta group) and raft.go (the end of
its replay). A part of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream`
(``net/jetstream/cluster.py``), over the state its ``__init__`` sets up.
"""

from __future__ import annotations

import os
import time
from typing import Any

import trio

from jetraft.jetstream.cluster import META_GROUP, MetaMachine, Propose
from jetraft.jetstream.layout import atomic_write
from jetraft.jetstream.meta_members import decode_hello, encode_hello
from jetraft.net.raft.group import SnapshotPolicy
from jetraft.storage import StorageError, fileio

__all__ = ["HELLO_REPEAT_S", "META_REPLAY_LEADER_WAIT_S", "MetaGroupRunner"]

#: Seconds between two hellos to the same JetStream server.
HELLO_REPEAT_S = 1.0
#: Seconds a server opening its meta group waits to hear from a meta leader before it
#: opens the replicas its own log assigns it (see ClusterJetStream._maybe_end_meta_replay).
META_REPLAY_LEADER_WAIT_S = 10.0


class MetaGroupRunner:
    """The meta group of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (see the
    module docstring)."""

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

    # ------------------------------------------------------------------ the group

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

    # ------------------------------------------------------------------ applied entries

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
