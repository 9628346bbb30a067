"""Stream replicas on one server of a JetStream cluster: each opened with its RAFT group
(:class:`~jetraft.jetstream.replicated.StreamReplica`, its log under
``<store_dir>/jetstream/_raft/``) or closed, the files of replicas no longer assigned here
removed after the replay at start-up (nats-server jetstream_cluster.go
processStreamRemoval), and a replica's leader changes told to the controller with
nats-server's leader advisories (sendConsumerLeaderElectAdvisory,
sendConsumerLostQuorumAdvisory).

The decisions are the controller's (:mod:`jetraft.jetstream.cluster.replicas`). A part of
:class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (``net/jetstream/cluster.py``), over
the state its ``__init__`` sets up. Fault isolation: a replica that cannot be opened is a
storage failure of its group (:mod:`.storage_failures`), an advisory that fails is
reported (``advisory_failed``) and its group goes on.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from jetraft.jetstream import advisories as adv
from jetraft.jetstream import errors as E
from jetraft.jetstream import layout
from jetraft.jetstream.api_subjects import peer_hash
from jetraft.jetstream.catchup import StreamSnapshotError
from jetraft.jetstream.cluster import META_GROUP, Key, OpenReplica
from jetraft.jetstream.model import API_LEVEL, StreamConfig
from jetraft.jetstream.replicated import StreamReplica
from jetraft.jetstream.requests import unmet_required_level
from jetraft.storage import StorageError, fileio

if TYPE_CHECKING:
    from jetraft.jetstream.meta import StreamAssignment

__all__ = ["ReplicaRunner"]


class ReplicaRunner:
    """The stream replicas of :class:`~jetraft.net.jetstream.cluster.ClusterJetStream` (see
    the module docstring)."""

    def _open_replica(self, action: OpenReplica) -> None:
        sa = action.assignment
        key = (sa.account, sa.name)
        acc = self.service.accounts[sa.account]
        try:
            level = unmet_required_level(sa.config)
            if level is not None:
                raise E.api_error("JSStreamOfflineReasonErrF", err=(
                    f"unsupported - required API level: {level}, current API level: {API_LEVEL}"))
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
