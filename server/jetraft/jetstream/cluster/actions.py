"""What the JetStream cluster controller reads and what it asks for.

:class:`ClusterView` (with :class:`GroupView` and :class:`RoutePeerView`) is the world as
the controller (:mod:`jetraft.jetstream.cluster`) reads it; the dataclasses below are the
actions it returns, carried out in order by ``net/jetstream/cluster.py``; the frames are how a
request forwarded to another server (``"jsapi"``) and a reply sent back through the server
a request came from (``"jsreply"``) travel in route APP frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack

from jetraft.jetstream.consumer import Delivery
from jetraft.jetstream.meta import StreamAssignment
from jetraft.jetstream.outbound import Outbound
from jetraft.jetstream.replicated import StreamReplica

__all__ = [
    "ChangePeer", "CloseMeta", "CloseReplica", "ToMetaLeader", "ClusterView", "Emit", "Forward", "ForwardedRequest",
    "GroupView", "Key", "OpenMeta", "OpenReplica", "Propose", "Read", "Refusal", "RemoveServer", "RoutePeerView",
    "Send", "SetInterest", "StepDown", "decode_forward", "decode_reply_frame",
    "encode_reply_frame",
]

#: A stream's key: ``(account, name)``.
Key = tuple[str, str]


# ---------------------------------------------------------------------- what the controller reads


class GroupView(Protocol):
    """A RAFT group as the controller sees it (``net/raft/host.py`` RaftGroup)."""

    @property
    def name(self) -> str: ...
    @property
    def leader(self) -> str | None: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def peers(self) -> tuple[str, ...]: ...
    @property
    def learners(self) -> tuple[str, ...]: ...
    @property
    def config_settled(self) -> bool:
        """On the leader: every configuration change in its log is committed."""
        ...
    def member_current(self, peer: str, now_ns: int) -> bool:
        """On the leader: ``peer`` (a member) answered and is caught up and online."""
        ...
    def replicas(self, now_ns: int) -> list[dict]:
        """On the leader, per other peer: ``name``, ``current`` (online, caught up), ...;
        [] on a follower (RaftGroup.replicas)."""
        ...


class RoutePeerView(Protocol):
    """A server connected by a route: its ``server_tags``, whether it runs JetStream, its
    cluster's name (``net/transport/route.py`` RoutePeer)."""

    tags: Any
    jetstream: bool
    cluster: str


class ClusterView(Protocol):
    """What the controller reads of the world. Every method answers from memory at once."""

    def group(self, key: Key) -> GroupView | None:
        """The RAFT group of the stream ``(account, name)`` on this server, if it holds one."""

    def replica(self, key: Key) -> StreamReplica | None:
        """The replica of the stream ``(account, name)`` on this server, if it holds one."""

    def meta_group_view(self) -> GroupView | None:
        """The meta group, once opened."""

    def meta_silent(self, now_ns: int) -> set[str]:
        """Meta group peers silent past an election timeout (as its leader sees them)."""

    def route_peers(self) -> Mapping[str, RoutePeerView]:
        """The servers connected by a route now, by name."""

    def routes_settled(self) -> bool:
        """Every route this server dials (configured or discovered) reached its server."""

    def has_interest(self, account: str, subject: str) -> bool:
        """A subscription (here, or through a route) matches ``subject``."""

    def has_remote_interest(self, account: str, subject: str) -> bool:
        """A subscription through a route matches ``subject``."""

    def replica_keys(self) -> list[Key]:
        """The streams ``(account, name)`` this server holds a replica of."""

    def storage_failed(self, group: str) -> bool:
        """The RAFT group ``group`` is stopped here by a storage failure."""

    def unreachable_since(self, name: str) -> int | None:
        """Wall-clock ns since which server ``name`` has had no route to this server (since
        this server started, if it never had one); None while the route is up."""


# ---------------------------------------------------------------------- what the controller asks


@dataclass(frozen=True, slots=True)
class Send:
    """Route ``out`` (a reply or a delivery) within ``account``. ``via``: the server the
    request came through: send it back there (route APP frame ``"jsreply"``,
    :func:`encode_reply_frame`) and route it here only when that fails."""

    account: str
    out: Outbound
    via: str | None = None


@dataclass(frozen=True, slots=True)
class Propose:
    """Propose ``data`` to the RAFT group named ``group``; when it is refused at once (not
    the leader, proposal dropped) carry out ``refused`` instead, and with ``abandon`` none
    of the actions after it in the same list either (nothing else of the request is done)."""

    group: str
    data: bytes
    refused: tuple[Any, ...] = ()
    abandon: bool = False


@dataclass(frozen=True, slots=True)
class Read:
    """Answer the read-only API request on ``subject`` (STREAM.INFO, STREAM.MSG.GET,
    DIRECT.GET, CONSUMER.INFO/NAMES/LIST) of the stream led through RAFT group ``group``
    once its leader has confirmed with a heartbeat round that it still leads and has
    applied every entry committed when the request came (ReadIndex, Raft thesis §6.4):
    the glue then calls :meth:`ClusterController.serve_read`. A new leader confirms only
    after its own term's first entry is committed, a deposed one never, so no read is
    answered from a state older than an acknowledged write. When the group refuses the
    read (no longer the leader, too many reads waiting) or loses its leadership first,
    ``refused`` is carried out instead."""

    group: str
    account: str
    subject: str
    reply: str | None
    headers: bytes | None
    payload: bytes
    refused: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Refusal:
    """In a :class:`Propose`'s ``refused`` or a :class:`Forward`'s ``unreachable``: answer
    ``reply`` with 10008 (JetStream system temporarily unavailable), as the API response
    ``rtype`` or, for a publish (``rtype`` None), as the PubAck of ``stream``. The glue asks
    :meth:`ClusterController.refusal` for the reply, so a proposal that goes through costs
    no error body."""

    account: str
    reply: str | None
    rtype: str | None = None
    stream: str = ""


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the request ``frame`` (:class:`ForwardedRequest` packed) to ``server`` in a
    route APP frame ``"jsapi"``; when there is no route to it carry out ``unreachable``."""

    server: str
    frame: bytes
    unreachable: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class AppFrame:
    """Send ``body`` to ``server`` in a route APP frame of ``kind`` (a mirror's or source's
    fetch and its answer, jetstream/cluster/sources.py); nothing when there is no route."""

    server: str
    kind: str
    body: bytes


@dataclass(frozen=True, slots=True)
class OpenReplica:
    """Create this server's replica of ``assignment`` and open its RAFT group with
    ``bootstrap`` as its first peers; ``campaign``: start an election at once if its log is
    empty (a brand-new group's first peer). Then carry out ``then``."""

    assignment: StreamAssignment
    bootstrap: tuple[str, ...]
    campaign: bool
    then: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class CloseReplica:
    """Close this server's replica of stream ``key`` and its RAFT group; ``delete``: remove
    its files too, also those of a replica that is not open (found on disk at start-up,
    its RAFT group ``group`` never opened since)."""

    key: Key
    delete: bool
    group: str | None = None


@dataclass(frozen=True, slots=True)
class OpenMeta:
    """Open (bootstrap) the meta group with ``peers``."""

    peers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ToMetaLeader:
    """Have the meta leader propose ``data``, a meta entry of one of the kinds a server
    may ask for (``clear_vacated``): proposed here when this server leads the meta group,
    else sent to the leader in a route APP frame ``"jsmetaop"``."""

    data: bytes


@dataclass(frozen=True, slots=True)
class CloseMeta:
    """This server was removed from the meta group while it was down: close the meta group
    and every stream replica, keeping their files (nothing is deleted on a removed
    server's own say-so), and open nothing until it is added again."""


@dataclass(frozen=True, slots=True)
class ChangePeer:
    """One membership step of the group named ``group``: ``op`` is ``"add"``,
    ``"add_learner"``, ``"promote"`` or ``"remove"`` of ``peer``, or ``"step_down"``. A RAFT
    refusal (a change in flight) is ignored: reconciliation asks again."""

    group: str
    op: str
    peer: str | None = None


@dataclass(frozen=True, slots=True)
class StepDown:
    """Hand the leadership of the group named ``group`` to its most up-to-date peer, then
    report the peer chosen (or None) with :meth:`ClusterController.step_down_done`.
    ``kind``: meta, stream or consumer; the answer goes to ``reply`` in ``account``."""

    group: str
    kind: str
    account: str
    reply: str | None
    rtype: str


@dataclass(frozen=True, slots=True)
class RemoveServer:
    """Remove ``peer`` from the meta group (a configuration change), then propose ``data``
    (its removal record) to the meta group; report the outcome with :meth:`ClusterController.server_remove_done`."""

    peer: str
    data: bytes
    account: str
    reply: str | None
    rtype: str


@dataclass(frozen=True, slots=True)
class SetInterest:
    """Add and remove internal route interest of ``account`` (a stream leader's subjects)."""

    account: str
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Emit:
    """Write the event ``event`` with ``fields`` to the event log."""

    event: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ForwardedRequest:
    """An API request travelling between servers: ``hops`` forwards so far, ``via_meta``
    sent by the meta leader, ``origin`` the server the client is on."""

    hops: int
    via_meta: bool
    account: str
    subject: str
    reply: str | None
    headers: bytes | None
    payload: bytes
    origin: str

    def pack(self) -> bytes:
        return msgpack.packb([self.hops, self.via_meta, self.account, self.subject, self.reply,
                              self.headers, self.payload, self.origin], use_bin_type=True)


def decode_forward(body: bytes) -> ForwardedRequest:
    """A ``"jsapi"`` frame's body; ValueError (or a msgpack error) when malformed."""
    hops, via_meta, account, subject, reply, headers, payload, origin = msgpack.unpackb(body, raw=False)
    if not (isinstance(account, str) and isinstance(subject, str) and isinstance(payload, bytes)
            and isinstance(origin, str)):
        raise ValueError("bad field types")
    return ForwardedRequest(int(hops), bool(via_meta), account, subject, reply, headers, payload, origin)


def encode_reply_frame(account: str, out: Outbound) -> bytes:
    """A ``"jsreply"`` frame's body: a reply or delivery sent back through its origin."""
    return msgpack.packb([account, out.subject, out.reply, out.headers, out.data,
                          getattr(out, "msg_subject", "") or ""], use_bin_type=True)


def decode_reply_frame(body: bytes) -> tuple[str, Outbound]:
    """``(account, message)`` of a ``"jsreply"`` body; ValueError/msgpack error if malformed."""
    account, subject, reply, headers, data, shown = msgpack.unpackb(body, raw=False)
    out = (Delivery(subject, reply, headers, data, shown) if shown
           else Outbound(subject, reply, headers, data))
    return account, out
