"""A scripted world for the JetStream cluster controller (jetraft.jetstream.cluster).

:class:`World` is the controller's ClusterView over plain dicts: RAFT groups whose leader a
test sets, route peers, subscription interest. :meth:`World.run` carries out the actions the
controller returns the way ``net/jetstream/cluster.py`` does, but records them instead of doing
I/O: replies (decoded JSON), forwards (decoded requests), proposals per group, events.
Proposals to the meta group are applied to the controller's MetaState when
:meth:`World.commit_meta` is called, as if the meta group committed them, and each change
goes back to the controller as ``meta_change``. A stream group's proposals are applied to
its replica by :meth:`World.apply`, as if committed in the term of its last election.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jetraft.events import EVENTS
from jetraft.jetstream.api import JetStreamAccount
from jetraft.jetstream.cluster import (
    META_GROUP,
    AppFrame,
    ChangePeer,
    CloseMeta,
    CloseReplica,
    ToMetaLeader,
    ClusterController,
    Emit,
    Forward,
    OpenMeta,
    OpenReplica,
    Propose,
    Read,
    Refusal,
    RemoveServer,
    Send,
    SetInterest,
    StepDown,
    decode_forward,
)
from jetraft.jetstream.meta import StreamAssignment, encode_assign_stream, group_name
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.replicated import StreamReplica
from jetraft.jetstream.validate import check_stream_create
from jetraft.storage import GroupCommit
from jetraft.raft.types import Entry, EntryType

T0 = 1_800_000_000_000_000_000
ME = "n1"


class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def emit(self, name: str, **fields: Any) -> None:
        assert name in EVENTS, f"{name} is not an event of the event log's schema"
        self.lines.append((name, fields))


@dataclass
class Group:
    """A RAFT group as the controller sees it; ``refuse``: proposals fail at once."""

    name: str
    peers: tuple[str, ...]
    leader: str | None = None
    refuse: bool = False
    proposals: list[bytes] = field(default_factory=list)
    #: the other peers its leader reports current (None: all of them)
    current: set[str] | None = None
    learners: tuple[str, ...] = ()
    config_settled: bool = True
    term: int = 1

    @property
    def is_leader(self) -> bool:
        return self.leader == ME

    def member_current(self, peer: str, now_ns: int) -> bool:
        return self.is_leader and (self.current is None or peer in self.current)

    def replicas(self, now_ns: int) -> list[dict]:
        if not self.is_leader:
            return []
        return [{"name": p, "current": self.current is None or p in self.current}
                for p in self.peers if p != ME]


@dataclass
class Peer:
    tags: tuple[str, ...] = ()
    jetstream: bool = True
    cluster: str = "c1"


class World:
    """The controller of server ``n1`` in a cluster of ``servers`` (route peers)."""

    def __init__(self, servers: dict[str, tuple[str, ...]] | None = None, *,
                 unique_tag: str = "", accounts: tuple[str, ...] = ("$G",)) -> None:
        servers = servers if servers is not None else {"n1": (), "n2": (), "n3": ()}
        self.events = Events()
        self.accounts = {name: JetStreamAccount(name, store_dir=None, sync=GroupCommit(), events=self.events,
                                                interest=lambda s: True, server_version="2.15.1",
                                                clustered=True, server_name=ME)
                         for name in accounts}
        self.peers = {n: Peer(tags) for n, tags in servers.items() if n != ME}
        self.meta: Group | None = None
        self.groups: dict[tuple[str, str], Group] = {}
        self.replicas: dict[tuple[str, str], StreamReplica] = {}
        self.local_interest: set[str] = set()
        self.remote_interest: set[str] = set()
        self.failed: set[str] = set()
        self.settled = True
        self.silent: set[str] = set()
        self.replies: list[tuple[str, dict | bytes]] = []      # (reply subject, body)
        self.sent: list[Outbound] = []                         # every message sent, as sent
        self.sent_via: list[str | None] = []
        self.forwards: list[tuple[str, Any]] = []              # (server, ForwardedRequest)
        self.frames: list[tuple[str, str, bytes]] = []          # AppFrame: (server, kind, body)
        self.unreachable: set[str] = set()                     # servers with no route
        #: server -> wall-clock ns since which no route to it is up (unreachable_since)
        self.no_route_since: dict[str, int] = {}
        self.closed: list[CloseReplica] = []
        self.removed_servers: list[RemoveServer] = []
        #: what RemoveServer meets (the meta group refusing the change), None: accepted
        self.remove_error: Any = None
        self.interest_changes: list[SetInterest] = []
        self.peer_changes: list[ChangePeer] = []
        self.stepdowns: list[StepDown] = []
        self.opened_meta: list[tuple[str, ...]] = []
        self.meta_closed = 0
        self.to_meta_leader: list[bytes] = []
        self.step_down_to: str | None = "n2"
        #: ReadIndex reads (Read actions) the groups took and have not confirmed; with
        #: ``reads_confirm_at_once`` each is confirmed (served) as soon as it is taken
        self.reads: list[Read] = []
        self.reads_confirm_at_once = True
        self._now = T0
        self.c = ClusterController(server_name=ME, cluster_name="c1",
                                   server_tags=servers.get(ME, ()), unique_tag=unique_tag,
                                   system_account="$SYS", accounts=self.accounts, view=self)

    # ---------------------------------------------------------------- ClusterView

    def group(self, key):
        return self.groups.get(key)

    def replica(self, key):
        return self.replicas.get(key)

    def replica_keys(self):
        return list(self.groups)

    def meta_group_view(self):
        return self.meta

    def meta_silent(self, now_ns):
        return set(self.silent)

    def route_peers(self):
        return self.peers

    def routes_settled(self):
        return self.settled

    def has_interest(self, account, subject):
        return subject in self.local_interest or subject in self.remote_interest

    def has_remote_interest(self, account, subject):
        return subject in self.remote_interest

    def storage_failed(self, group):
        return group in self.failed

    def unreachable_since(self, name):
        return self.no_route_since.get(name)

    # ---------------------------------------------------------------- driving

    def meta_leader(self, leader: str | None, peers: tuple[str, ...] = ("n1", "n2", "n3")) -> None:
        if self.meta is None:
            self.meta = Group(META_GROUP, peers)
        self.meta.leader = leader

    def request(self, subject: str, body: Any = None, *, account: str = "$G", reply: str | None = "_INBOX.r",
                now: int = T0, headers: bytes | None = None, **kw: Any) -> bool:
        raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        taken, actions = self.c.handle(account, subject, reply, headers, raw, now, **kw)
        self.run(actions)
        return taken

    def receive(self, src: str, frame: bytes, now: int = T0) -> bool:
        """A ``"jsapi"`` route frame from server ``src``."""
        taken, actions = self.c.forwarded(src, frame, now)
        self.run(actions)
        return taken

    def tick(self, mono: int, now: int = T0) -> None:
        self.run(self.c.tick(now, mono))

    def assign(self, name: str, *, subjects: tuple[str, ...] | None = None,
               peers: tuple[str, ...] = ("n1", "n2", "n3"), account: str = "$G",
               leader: str | None = None, now: int = T0, **config: Any) -> tuple[str, str]:
        """Apply a meta entry assigning stream ``name`` to ``peers`` (as every server of the
        meta group applies it, whoever proposed it); then elect ``leader`` in its group
        when this server holds a replica. Returns the stream's key."""
        body = {"name": name, "subjects": list(subjects if subjects is not None else (f"{name.lower()}.>",)),
                "num_replicas": len(peers), "storage": "memory", **config}
        cfg, _exists = check_stream_create(json.dumps(body).encode(), name, [], existing=lambda _n: None,
                                           clustered=True)    # as the meta leader stores it
        sa = StreamAssignment(account=account, name=name, config=cfg.to_json(),
                              group=group_name("S", account, name, now, replicas=len(peers), storage="memory"),
                              peers=tuple(peers), created_ns=now, reply=None)
        for change in self.c.meta.apply(encode_assign_stream(sa)):
            self.run(self.c.meta_change(change, now))
        key = (account, name)
        if leader is not None and key in self.groups:
            self.elect(key, leader, now=now)
        return key

    def run(self, actions: list[Any]) -> None:
        for a in actions:
            t = type(a)
            if t is Send:
                data = a.out.data
                try:
                    body: Any = json.loads(data)
                except ValueError:
                    body = data
                self.replies.append((a.out.subject, body))
                self.sent.append(a.out)
                self.sent_via.append(a.via)
            elif t is Propose:
                group = self._taking(a.group)
                if group is None:
                    self.run(list(a.refused))
                    if a.abandon:
                        return
                else:
                    group.proposals.append(a.data)
            elif t is Read:
                if self._taking(a.group) is None:
                    self.run(list(a.refused))
                elif self.reads_confirm_at_once:
                    self.run(self.c.serve_read(a, self._now))
                else:
                    self.reads.append(a)
            elif t is Forward:
                if a.server in self.unreachable or a.server not in self.peers:
                    self.run(list(a.unreachable))
                else:
                    self.forwards.append((a.server, decode_forward(a.frame)))
            elif t is AppFrame:
                self.frames.append((a.server, a.kind, a.body))
            elif t is SetInterest:
                self.interest_changes.append(a)
            elif t is Emit:
                self.events.emit(a.event, **a.fields)
            elif t is OpenReplica:
                sa = a.assignment
                key = (sa.account, sa.name)
                acc = self.accounts[sa.account]
                acc.create_replica(sa.config, sa.created_ns)
                replica = StreamReplica(acc, sa.name, emit=lambda r, k=key: self.run(self.c.send_replies(k[0], r)),
                                        override=self.c.override, on_leader=self._leader_fn(key))
                self.replicas[key] = replica
                self.groups[key] = Group(sa.group, a.bootstrap)
                self.run(list(a.then))
            elif t is CloseReplica:
                self.closed.append(a)
                replica = self.replicas.pop(a.key, None)
                self.groups.pop(a.key, None)
                acc = self.accounts.get(a.key[0])
                if replica is not None and acc is not None:
                    acc.delete_replica(a.key[1])
                    self.events.emit("jetstream_stream_deleted", account=a.key[0], stream=a.key[1])
            elif t is ChangePeer:
                self.peer_changes.append(a)
            elif t is ToMetaLeader:
                self.to_meta_leader.append(a.data)
            elif t is CloseMeta:
                self.meta_closed += 1
                self.meta = None
                self.groups.clear()
                self.replicas.clear()
            elif t is StepDown:
                self.stepdowns.append(a)
                self.run(self.c.step_down_done(a, self.step_down_to))
            elif t is RemoveServer:
                self.removed_servers.append(a)
                if self.remove_error is None:
                    self.meta.peers = tuple(p for p in self.meta.peers if p != a.peer)
                    self.meta.proposals.append(a.data)
                self.run(self.c.server_remove_done(a, self.remove_error))
            elif t is Refusal:
                self.run(self.c.refusal(a))
            elif t is OpenMeta:
                self.opened_meta.append(a.peers)
            else:
                raise AssertionError(f"unknown action {a!r}")

    def commit_meta(self, now: int = T0) -> None:
        """Apply the meta group's proposals so far, in order, as committed."""
        props, self.meta.proposals = self.meta.proposals, []
        for data in props:
            for change in self.c.meta.apply(data):
                self.run(self.c.meta_change(change, now))

    def _leader_fn(self, key: tuple[str, str]):
        def on_leader(leader: str | None, term: int) -> None:
            self.run(self.c.leader_changed(key, leader, term, self._now))
        return on_leader

    def elect(self, key: tuple[str, str], leader: str | None, now: int = T0, term: int = 1) -> None:
        """The stream group of ``key`` elected ``leader`` in ``term``: the RAFT host tells
        the replica, which tells the controller (``net/jetstream/cluster.py`` _leader_fn)."""
        self.groups[key].leader = leader
        self._now = now
        self.replicas[key].leader_changed(leader, term)

    def apply(self, key: tuple[str, str]) -> None:
        """Commit and apply the proposals made so far to the stream group of ``key``, in the
        term of its last election (its replica sends what its leader's apply produced)."""
        group, replica = self.groups[key], self.replicas[key]
        props, group.proposals = group.proposals, []
        start = replica.applied_index + 1
        replica.apply([Entry(term=replica.term, index=start + i, type=EntryType.NORMAL, data=d)
                       for i, d in enumerate(props)])

    def _taking(self, name: str) -> Group | None:
        """The group named ``name`` if it takes a proposal or a read now (this server leads
        it and it does not refuse), else None."""
        group = self.meta if name == META_GROUP else next(
            (g for g in self.groups.values() if g.name == name), None)
        if group is None or group.refuse or not group.is_leader:
            return None
        return group

    def confirm_reads(self) -> None:
        """The groups confirmed the reads waiting (ReadIndex): the controller serves them."""
        reads, self.reads = self.reads, []
        for a in reads:
            self.run(self.c.serve_read(a, self._now))

    def take_replies(self) -> list[tuple[str, Any]]:
        """The replies so far (forgotten here, with their raw messages and ``via``)."""
        out, self.replies = self.replies, []
        self.sent, self.sent_via = [], []
        return out

    def events_named(self, name: str) -> list[dict]:
        return [f for n, f in self.events.lines if n == name]
