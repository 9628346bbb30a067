"""The meta group's replicated state machine: which stream and consumer lives where.

Pure and sans-IO. Every JetStream server applies the meta group's committed entries, in
order, to its :class:`MetaState`; the same entries give the same state everywhere (no
clock, no randomness: times travel inside the entries, placement is decided by the
leader before it proposes). :meth:`MetaState.apply` returns :class:`MetaChange` rows so
the server knows what to start, stop or reconfigure.

Follows nats-server ``server/jetstream_cluster.go``: ``streamAssignment`` /
``consumerAssignment`` / ``raftGroup`` (what an assignment holds), ``applyMetaEntries``
(``assignStreamOp``, ``updateStreamOp``, ``removeStreamOp``, ``assignConsumerOp``,
``removeConsumerOp``, ``EntryRemovePeer``), ``processStreamAssignment`` (an assign
replaces, consumers carry over), ``processUpdateStreamAssignment`` and
``processConsumerAssignment`` (ignored when the stream is unknown),
``processStreamRemoval`` (a stream takes its consumers with it),
``reassignStreamPeers`` / ``remapConsumerAssignments`` (a replaced peer is replaced in
the stream's consumers too, and a stale preferred leader is dropped), and
``metaSnapshot`` / ``applyMetaSnapshot`` (snapshot, and the diff when installing one).

Entry wire format: one msgpack map (``use_bin_type``), ``{"op": <name>, ...}``:

=====================  ==========================================================================
``assign_stream``      ``sa``: assignment map (below)
``update_stream``      ``account``, ``name``, ``config``, ``peers`` (list or nil), ``reply``
``remove_stream``      ``account``, ``name``, ``reply`` (str or nil)
``assign_consumer``    ``ca``: assignment map (below)
``remove_consumer``    ``account``, ``stream``, ``name``, ``reply`` (str or nil)
``replace_peer``       ``account``, ``name``, ``old``, ``new``
``remove_server``      ``server``
``member_store``       ``server``, ``store``: the store (RAFT identity) the server now runs with
``add_stream_peer``    ``account``, ``name``, ``peer``: fill a vacant replica slot
``clear_vacated``      ``account``, ``name``, ``server``: its old replica left the stream's group
``restore_state``      ``account``, ``name``, ``state``: a restore's next phase (``"catchup"``,
                       or nil once done)
=====================  ==========================================================================

Store identities (jetraft's own, for servers that lost their disk): every server's store
has a random id, created with the store. The meta leader records each member's with
``member_store``. A server seen again with another id lost its store (a wiped disk, a new
machine under the same name): recording the new id vacates its replica slots in every
stream and consumer (its peers drop it: ``stream_peers_changed``), because its old
replicas' data and RAFT votes are gone; the leader then fills the vacant slots with
``add_stream_peer`` under the usual placement rules, and the server joins again as a new
member. A server removed with ``remove_server`` whose new id is recorded is no longer
removed: the identity that was removed is gone with its store. A stream does not get a new replica on the server whose slot was vacated until the
stream's leader has seen the old replica's removal from its RAFT group committed
(``clear_vacated``): the old identity must not be taken for the new one.

A stream assignment map has ``account``, ``name``, ``config`` (a JSON-able map, the
stream config as the API stored it), ``group``, ``peers`` (list of server names),
``created_ns`` (int, ns since the epoch) and optional ``reply`` / ``preferred`` /
``restore`` / ``restored_by`` (a stream created by a restore, see :class:`StreamAssignment`); a
consumer assignment map has ``account``, ``stream``, ``name``, ``config``, ``group``,
``peers``, ``created_ns``, optional ``reply``. Unknown keys are ignored (a newer
server may add some); a missing or mistyped key, an unknown op, or bytes that are not
msgpack raise :class:`MetaEntryError` and leave the state untouched.

Re-application is harmless (entries may be replayed over a snapshot after a restart):
removing an unknown stream or consumer, updating an unknown stream, assigning a consumer
to an unknown stream, replacing a peer that is not (or no longer) in the group, and
removing an already removed server all change nothing and return ``[]``. So does an
assign or update that leaves an assignment as it was (``reply`` aside): the API layer
answers such requests itself, without proposing (as nats-server does for an equal
STREAM.CREATE).

The snapshot is a msgpack map ``{"v": 1, "streams": [...], "consumers": [...],
"removed": [...], "stores": {server: id}}`` sorted by key (``stores`` may be missing in a
snapshot of an older server), so equal states give equal bytes; the ``reply``
subjects are not in it (nats-server ``writeableStreamAssignment`` leaves them out too).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

__all__ = [
    "SNAPSHOT_VERSION",
    "ConsumerAssignment",
    "MetaChange",
    "MetaEntryError",
    "MetaState",
    "StreamAssignment",
    "encode_assign_consumer",
    "encode_assign_stream",
    "encode_remove_consumer",
    "encode_remove_server",
    "encode_remove_stream",
    "encode_replace_stream_peer",
    "encode_update_stream",
    "group_name",
]

SNAPSHOT_VERSION = 1

#: The characters of nats-server's short hashes (server/accounts.go ``digits``, base 62).
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: sysHashLen (server/events.go): the length of a group name's hash part.
_HASH_LEN = 8


#: The phases of a restore (:attr:`StreamAssignment.restore`).
RESTORE_PHASES = (None, "data", "catchup")


class MetaEntryError(ValueError):
    """A meta entry or snapshot that cannot be decoded or applied; the state is unchanged."""


# --- Assignments ---------------------------------------------------------------------


@dataclass(frozen=True)
class StreamAssignment:
    """A stream placed on a RAFT group (nats-server ``streamAssignment`` + ``raftGroup``).

    ``config``: the stream config as a JSON-able dict, as the API stored it (treat as
    read-only). ``group``: the RAFT group name (:func:`group_name`). ``peers``: server
    names, in placement order. ``created_ns``: creation time, ns since the epoch.
    ``reply``: the API reply subject to answer once created, and ``client`` the requester's
    client info for the API audit of that answer (nats-server ``streamAssignment.Client``;
    neither compared nor in snapshots). ``preferred``: the server that should lead, or ``None``. ``vacated``:
    servers that lost their store while they were peers (``member_store``): not placed back
    on this stream (their old replica may still be in its RAFT group).

    A stream created by ``$JS.API.STREAM.RESTORE`` (nats-server ``streamAssignment.Restore``):
    ``restored_by`` is the peer that receives the backup and builds the stream (it leads a
    group of itself alone until then); ``restore`` is the restore's phase: ``"data"`` (the
    data is being received: the other peers open no replica), ``"catchup"`` (the data is in
    the restoring peer's store and RAFT snapshot: the other peers open their replicas and
    are added to its group, taking the snapshot), ``None`` once done (the stream takes
    publishes and API requests).
    """

    account: str
    name: str
    config: dict[str, Any]
    group: str
    peers: tuple[str, ...]
    created_ns: int
    reply: str | None = field(default=None, compare=False)
    preferred: str | None = None
    vacated: tuple[str, ...] = ()
    client: dict[str, Any] | None = field(default=None, compare=False)
    restore: str | None = None
    restored_by: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """``(account, name)``, its key in :attr:`MetaState.streams`."""
        return (self.account, self.name)


@dataclass(frozen=True)
class ConsumerAssignment:
    """A consumer placed on a RAFT group of its stream's peers (nats-server ``consumerAssignment``).

    Fields as :class:`StreamAssignment`; ``stream`` is the stream's name (same account).
    """

    account: str
    stream: str
    name: str
    config: dict[str, Any]
    group: str
    peers: tuple[str, ...]
    created_ns: int
    reply: str | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """``(account, stream, name)``, its key in :attr:`MetaState.consumers`."""
        return (self.account, self.stream, self.name)


Assignment = StreamAssignment | ConsumerAssignment


@dataclass(frozen=True)
class MetaChange:
    """One thing an applied entry changed, for the server to act on.

    ``kind`` is one of:

    - ``stream_added`` / ``consumer_added``: ``assignment`` is new;
    - ``stream_updated`` / ``consumer_updated``: ``assignment`` replaced ``old``
      (config, group, peers, created or preferred differ);
    - ``stream_removed`` / ``consumer_removed``: ``assignment`` is gone (a removed
      stream's consumers come first, each as ``consumer_removed``);
    - ``stream_peers_changed`` / ``consumer_peers_changed``: a peer was replaced
      (``encode_replace_stream_peer``);
    - ``stream_create_repeated``: ``assignment`` (with a reply to answer) names a stream
      already assigned (``old``) with the same RAFT group, or another one, and changed
      nothing: the first assignment of a name wins;
    - ``server_removed``: first one row with ``assignment`` ``None``, then one row per
      stream and per consumer whose peers include ``server`` (they still do; the leader
      replaces it with ``encode_replace_stream_peer``).

    ``old_peers`` is ``old.peers`` when there is an ``old``, else ``()``. ``reply`` is the
    API reply subject of the entry that made the change, for removals (for assigns and
    updates it is ``assignment.reply``); ``None`` otherwise.
    """

    kind: str
    assignment: Assignment | None = None
    old_peers: tuple[str, ...] = ()
    old: Assignment | None = None
    server: str | None = None
    reply: str | None = None


def _updated(kind: str, new: Assignment, old: Assignment) -> MetaChange:
    return MetaChange(kind, new, old.peers, old)


# --- Group names ---------------------------------------------------------------------


def group_name(
    kind: str,
    account: str,
    name: str,
    created_ns: int,
    *,
    replicas: int,
    stream: str | None = None,
    storage: str = "file",
) -> str:
    """A RAFT group name: ``"S-R3F-Ab12Cd34"`` (stream) or ``"C-R1M-..."`` (consumer).

    Shape as nats-server ``groupName`` (server/jetstream_cluster.go): prefix, ``R`` and
    the replica count, the storage's initial (``F`` file, ``M`` memory), then 8 base-62
    characters of a SHA-256 (nats-server ``getHash``). nats-server hashes a random nuid;
    jetraft hashes ``kind``, ``account``, ``stream``, ``name`` and ``created_ns`` (ns
    since the epoch) so the name is reproducible yet differs when a stream is deleted and
    created again. Only ``[A-Za-z0-9-]``: safe as a directory name.

    ``kind``: ``"stream"`` (or ``"S"``) or ``"consumer"`` (or ``"C"``; then ``stream``,
    the consumer's stream name, is required). Raises ``ValueError`` on a bad kind,
    storage or replica count.
    """
    kind = {"S": "stream", "C": "consumer"}.get(kind, kind)
    if kind not in ("stream", "consumer"):
        raise ValueError(f"group kind must be 'stream' or 'consumer', got {kind!r}")
    if (kind == "consumer") != (stream is not None):
        raise ValueError("stream= is required for a consumer group and only for one")
    if storage not in ("file", "memory"):
        raise ValueError(f"storage must be 'file' or 'memory', got {storage!r}")
    if type(replicas) is not int or replicas < 1:
        raise ValueError(f"replicas must be a positive int, got {replicas!r}")
    seed = "\x00".join((kind, account, stream or "", name, str(created_ns))).encode()
    digest = hashlib.sha256(seed).digest()
    suffix = "".join(_DIGITS[b % len(_DIGITS)] for b in digest[:_HASH_LEN])
    return f"{'S' if kind == 'stream' else 'C'}-R{replicas}{storage[0].upper()}-{suffix}"


# --- Entry decoding (validation before any change) ------------------------------------


class _Reader:
    """Typed access to one decoded msgpack map, raising MetaEntryError naming ``where``."""

    __slots__ = ("data", "where")

    def __init__(self, data: Any, where: str) -> None:
        if type(data) is not dict:
            raise MetaEntryError(f"{where}: expected a map, got {type(data).__name__}")
        self.data = data
        self.where = where

    def _get(self, key: str, types: tuple[type, ...], optional: bool) -> Any:
        if key not in self.data:
            if optional:
                return None
            raise MetaEntryError(f"{self.where}: missing {key!r}")
        value = self.data[key]
        if value is None and optional:
            return None
        if type(value) not in types:
            raise MetaEntryError(f"{self.where}: {key!r} has type {type(value).__name__}")
        return value

    def name(self, key: str) -> str:
        value = self._get(key, (str,), False)
        if not value:
            raise MetaEntryError(f"{self.where}: {key!r} is empty")
        return value

    def opt_str(self, key: str) -> str | None:
        return self._get(key, (str,), True)

    def time(self, key: str) -> int:
        value = self._get(key, (int,), False)
        if value < 0:
            raise MetaEntryError(f"{self.where}: {key!r} is negative")
        return value

    def config(self, key: str) -> dict[str, Any]:
        value = self._get(key, (dict,), False)
        _check_json(value, f"{self.where}: {key}")
        return value

    def peers(self, key: str, optional: bool = False) -> tuple[str, ...] | None:
        value = self._get(key, (list,), optional)
        if value is None:
            return None
        if not value or any(type(p) is not str or not p for p in value):
            raise MetaEntryError(f"{self.where}: {key!r} must be a non-empty list of server names")
        if len(set(value)) != len(value):
            raise MetaEntryError(f"{self.where}: {key!r} names a server twice")
        return tuple(value)

    def opt_client(self, key: str) -> dict[str, Any] | None:
        """An optional JSON object that nothing depends on (a request's client info): one
        that is not a JSON object is read as None, never an error."""
        value = self.data.get(key)
        if type(value) is not dict:
            return None
        try:
            _check_json(value, self.where)
        except MetaEntryError:
            return None
        return value

    def map(self, key: str) -> _Reader:
        return _Reader(self._get(key, (dict,), False), f"{self.where}.{key}")

    def seq(self, key: str) -> list[Any]:
        return self._get(key, (list,), False)

    def num(self, key: str) -> int:
        return self._get(key, (int,), False)


def _check_json(value: Any, where: str) -> None:
    """Raise MetaEntryError unless ``value`` is JSON-able (str keys; no bytes)."""
    if value is None or type(value) in (bool, int, float, str):
        return
    if type(value) is list:
        for item in value:
            _check_json(item, where)
        return
    if type(value) is dict:
        for k, item in value.items():
            if type(k) is not str:
                raise MetaEntryError(f"{where}: a map key is not a string")
            _check_json(item, where)
        return
    raise MetaEntryError(f"{where}: {type(value).__name__} is not JSON-able")


def _read_stream(r: _Reader) -> StreamAssignment:
    sa = StreamAssignment(
        account=r.name("account"), name=r.name("name"), config=r.config("config"),
        group=r.name("group"), peers=r.peers("peers"), created_ns=r.time("created_ns"),
        reply=r.opt_str("reply"), preferred=r.opt_str("preferred"),
        vacated=r.peers("vacated", optional=True) or (),
        restore=r.opt_str("restore"), restored_by=r.opt_str("restored_by"),
        client=r.opt_client("client"),
    )
    if sa.restore not in RESTORE_PHASES:
        raise MetaEntryError(f"{r.where}: restore phase {sa.restore!r} is not one of {RESTORE_PHASES}")
    if sa.restore is not None and sa.restored_by not in sa.peers:
        raise MetaEntryError(f"{r.where}: restored_by {sa.restored_by!r} is not a peer")
    if sa.config.get("name", sa.name) != sa.name:
        raise MetaEntryError(f"{r.where}: config name {sa.config.get('name')!r} is not {sa.name!r}")
    if sa.preferred is not None and sa.preferred not in sa.peers:
        raise MetaEntryError(f"{r.where}: preferred {sa.preferred!r} is not a peer")
    return sa


def _read_consumer(r: _Reader) -> ConsumerAssignment:
    return ConsumerAssignment(
        account=r.name("account"), stream=r.name("stream"), name=r.name("name"),
        config=r.config("config"), group=r.name("group"), peers=r.peers("peers"),
        created_ns=r.time("created_ns"), reply=r.opt_str("reply"),
    )


def _stream_map(sa: StreamAssignment, *, with_reply: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "account": sa.account, "name": sa.name, "config": sa.config, "group": sa.group,
        "peers": list(sa.peers), "created_ns": sa.created_ns,
    }
    if with_reply and sa.reply is not None:
        out["reply"] = sa.reply
    if with_reply and sa.client is not None:
        out["client"] = sa.client
    if sa.preferred is not None:
        out["preferred"] = sa.preferred
    if sa.vacated:
        out["vacated"] = list(sa.vacated)
    if sa.restore is not None:
        out["restore"] = sa.restore
    if sa.restored_by is not None:
        out["restored_by"] = sa.restored_by
    return out


def _consumer_map(ca: ConsumerAssignment, *, with_reply: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "account": ca.account, "stream": ca.stream, "name": ca.name, "config": ca.config,
        "group": ca.group, "peers": list(ca.peers), "created_ns": ca.created_ns,
    }
    if with_reply and ca.reply is not None:
        out["reply"] = ca.reply
    return out


def _unpack(data: bytes, what: str) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MetaEntryError(f"{what}: expected bytes, got {type(data).__name__}")
    try:
        return msgpack.unpackb(bytes(data), raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many kinds; all mean malformed
        raise MetaEntryError(f"{what}: not valid msgpack: {exc}") from exc


def _pack(entry: dict[str, Any]) -> bytes:
    """Pack an entry after checking it decodes (so a bad argument fails at the proposer)."""
    try:
        data = msgpack.packb(entry, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise MetaEntryError(f"meta entry {entry.get('op')}: cannot encode: {exc}") from exc
    _decode_entry(data)
    return data


# --- Entry constructors ----------------------------------------------------------------


def encode_assign_stream(sa: StreamAssignment) -> bytes:
    """Entry: create ``sa``, or replace the assignment with its key (nats-server ``assignStreamOp``).

    Raises :class:`MetaEntryError` (a ``ValueError``) when ``sa`` is not valid.
    """
    return _pack({"op": "assign_stream", "sa": _stream_map(sa)})


def encode_update_stream(
    account: str, name: str, config: dict[str, Any], peers: Iterable[str] | None = None,
    *, reply: str | None = None,
) -> bytes:
    """Entry: new ``config`` (and, if given, new ``peers``) for an existing stream (``updateStreamOp``).

    The group name, creation time and consumers stay; a preferred leader no longer among
    the peers is dropped; the new assignment's ``reply`` is ``reply`` (the API request to
    answer). Raises :class:`MetaEntryError` on bad arguments.
    """
    return _pack({"op": "update_stream", "account": account, "name": name, "config": config,
                  "peers": None if peers is None else list(peers), "reply": reply})


def encode_remove_stream(account: str, name: str, *, reply: str | None = None) -> bytes:
    """Entry: remove a stream and all its consumers (``removeStreamOp``); ``reply`` comes back in the change."""
    return _pack({"op": "remove_stream", "account": account, "name": name, "reply": reply})


def encode_assign_consumer(ca: ConsumerAssignment) -> bytes:
    """Entry: create ``ca``, or replace the assignment with its key (``assignConsumerOp``)."""
    return _pack({"op": "assign_consumer", "ca": _consumer_map(ca)})


def encode_remove_consumer(account: str, stream: str, name: str, *, reply: str | None = None) -> bytes:
    """Entry: remove one consumer (``removeConsumerOp``); ``reply`` comes back in the change."""
    return _pack({"op": "remove_consumer", "account": account, "stream": stream, "name": name, "reply": reply})


def encode_replace_stream_peer(account: str, name: str, old_peer: str, new_peer: str) -> bytes:
    """Entry: put ``new_peer`` where ``old_peer`` was, in the stream and in every consumer of it.

    The leader chooses ``new_peer`` with :func:`~jetraft.jetstream.placement.select_peers`
    (``existing`` = the other peers, ``exclude`` = ``old_peer`` and removed servers),
    as nats-server ``reassignStreamPeers`` + ``remapConsumerAssignments`` do after a
    peer-remove. Raises :class:`MetaEntryError` when ``old_peer == new_peer``.
    """
    if old_peer == new_peer:
        raise MetaEntryError("replace_peer: the old and new peer are the same")
    return _pack({"op": "replace_peer", "account": account, "name": name, "old": old_peer, "new": new_peer})


def encode_remove_server(name: str) -> bytes:
    """Entry: server ``name`` left the cluster for good (nats-server ``EntryRemovePeer``)."""
    return _pack({"op": "remove_server", "server": name})


def encode_member_store(name: str, store: str) -> bytes:
    """Entry: server ``name`` runs with store id ``store`` (see the module docstring)."""
    return _pack({"op": "member_store", "server": name, "store": store})


def encode_clear_vacated(account: str, name: str, server: str) -> bytes:
    """Entry: the old replica of ``server`` (which lost its store) has left the RAFT group
    of stream ``name``: the server may hold one of its replicas again."""
    return _pack({"op": "clear_vacated", "account": account, "name": name, "server": server})


def encode_restore_state(account: str, name: str, state: str | None) -> bytes:
    """Entry: the restore of stream ``name`` enters phase ``state`` (``"catchup"``), or is
    done (None); see :class:`StreamAssignment`."""
    return _pack({"op": "restore_state", "account": account, "name": name, "state": state})


def entry_stream(data: bytes) -> tuple[str, str]:
    """``(account, name)`` of the stream a ``restore_state`` or ``remove_stream`` entry
    is about (MetaEntryError when it does not decode or is of another op)."""
    op, args = _decode_entry(data)
    if op not in ("restore_state", "remove_stream"):
        raise MetaEntryError(f"meta entry {op}: not about one stream's restore")
    return args[0], args[1]


def decode_op(data: bytes) -> str:
    """The ``op`` of a meta entry (MetaEntryError when it does not decode)."""
    return _decode_entry(data)[0]


def encode_add_stream_peer(account: str, name: str, peer: str) -> bytes:
    """Entry: ``peer`` takes a vacant replica slot of stream ``name`` (and of its
    consumers): the stream has fewer peers than its ``num_replicas``."""
    return _pack({"op": "add_stream_peer", "account": account, "name": name, "peer": peer})


# --- Decoded operations ------------------------------------------------------------------


def _decode_entry(data: bytes) -> tuple[str, Any]:
    """Decode and check one entry: ``(op, arguments)``; raises MetaEntryError."""
    r = _Reader(_unpack(data, "meta entry"), "meta entry")
    op = r.name("op")
    r.where = f"meta entry {op}"
    if op == "assign_stream":
        return op, _read_stream(r.map("sa"))
    if op == "assign_consumer":
        return op, _read_consumer(r.map("ca"))
    if op == "update_stream":
        name, config = r.name("name"), r.config("config")
        if config.get("name", name) != name:
            raise MetaEntryError(f"{r.where}: config name {config.get('name')!r} is not {name!r}")
        return op, (r.name("account"), name, config, r.peers("peers", optional=True), r.opt_str("reply"))
    if op == "remove_stream":
        return op, (r.name("account"), r.name("name"), r.opt_str("reply"))
    if op == "remove_consumer":
        return op, (r.name("account"), r.name("stream"), r.name("name"), r.opt_str("reply"))
    if op == "replace_peer":
        args = (r.name("account"), r.name("name"), r.name("old"), r.name("new"))
        if args[2] == args[3]:
            raise MetaEntryError(f"{r.where}: the old and new peer are the same")
        return op, args
    if op == "remove_server":
        return op, r.name("server")
    if op == "member_store":
        return op, (r.name("server"), r.name("store"))
    if op == "add_stream_peer":
        return op, (r.name("account"), r.name("name"), r.name("peer"))
    if op == "clear_vacated":
        return op, (r.name("account"), r.name("name"), r.name("server"))
    if op == "restore_state":
        state = r.opt_str("state")
        if state not in RESTORE_PHASES:
            raise MetaEntryError(f"{r.where}: restore phase {state!r} is not one of {RESTORE_PHASES}")
        return op, (r.name("account"), r.name("name"), state)
    raise MetaEntryError(f"meta entry: unknown op {op!r}")


def replicas_of(sa: StreamAssignment) -> int:
    """The replica count the stream's config asks for (``num_replicas``, at least 1)."""
    n = sa.config.get("num_replicas", 1)
    return n if isinstance(n, int) and n >= 1 else 1


def _swap_peer(peers: tuple[str, ...], old: str, new: str) -> tuple[str, ...]:
    return tuple(new if p == old else p for p in peers)


# --- The state machine ---------------------------------------------------------------------


@dataclass
class MetaState:
    """Every stream and consumer assignment, the removed servers and the members' stores.

    ``streams`` is keyed ``(account, name)``, ``consumers`` ``(account, stream, name)``;
    ``removed_servers`` holds servers removed with :func:`encode_remove_server`;
    ``stores`` each member's store id (:func:`encode_member_store`).
    Compare two states with ``==`` (``reply`` subjects are ignored).
    """

    streams: dict[tuple[str, str], StreamAssignment] = field(default_factory=dict)
    consumers: dict[tuple[str, str, str], ConsumerAssignment] = field(default_factory=dict)
    removed_servers: set[str] = field(default_factory=set)
    #: each member's store id (``member_store``; see the module docstring)
    stores: dict[str, str] = field(default_factory=dict)

    # --- applying entries

    def apply(self, data: bytes) -> list[MetaChange]:
        """Decode one committed entry and apply it; returns what changed (maybe ``[]``).

        Raises :class:`MetaEntryError` for a malformed entry, before changing anything.
        """
        op, args = _decode_entry(data)
        handler: Callable[[Any], list[MetaChange]] = getattr(self, f"_apply_{op}")
        return handler(args)

    def _apply_assign_stream(self, sa: StreamAssignment) -> list[MetaChange]:
        old = self.streams.get(sa.key)
        if old is not None and (old == sa or old.group != sa.group):
            # a second create of the name, proposed before the first one applied (by the
            # meta leader for the same config, by a meta leader behind its log, or by two
            # leaders in turn): the first wins, and its RAFT group with it; the stream is
            # never moved to an empty group
            if sa.reply is None or sa.reply == old.reply:
                return []
            return [MetaChange("stream_create_repeated", sa, old.peers, old)]
        self.streams[sa.key] = sa
        return [MetaChange("stream_added", sa) if old is None else _updated("stream_updated", sa, old)]

    def _apply_update_stream(
        self, args: tuple[str, str, dict[str, Any], tuple[str, ...] | None, str | None],
    ) -> list[MetaChange]:
        account, name, config, peers, reply = args
        old = self.streams.get((account, name))
        if old is None:
            return []
        peers = old.peers if peers is None else peers
        preferred = old.preferred if old.preferred in peers else None
        new = dataclasses.replace(old, config=config, peers=peers, preferred=preferred, reply=reply)
        if new == old:
            return []
        self.streams[old.key] = new
        return [_updated("stream_updated", new, old)]

    def _apply_remove_stream(self, args: tuple[str, str, str | None]) -> list[MetaChange]:
        account, name, reply = args
        old = self.streams.get((account, name))
        if old is None:
            return []
        changes = [MetaChange("consumer_removed", self.consumers.pop(ca.key))
                   for ca in self.consumers_of(account, name)]
        del self.streams[old.key]
        changes.append(MetaChange("stream_removed", old, reply=reply))
        return changes

    def _apply_assign_consumer(self, ca: ConsumerAssignment) -> list[MetaChange]:
        if (ca.account, ca.stream) not in self.streams:
            return []
        old = self.consumers.get(ca.key)
        if old == ca:
            return []
        self.consumers[ca.key] = ca
        return [MetaChange("consumer_added", ca) if old is None else _updated("consumer_updated", ca, old)]

    def _apply_remove_consumer(self, args: tuple[str, str, str, str | None]) -> list[MetaChange]:
        account, stream, name, reply = args
        old = self.consumers.pop((account, stream, name), None)
        return [] if old is None else [MetaChange("consumer_removed", old, reply=reply)]

    def _apply_replace_peer(self, args: tuple[str, str, str, str]) -> list[MetaChange]:
        account, name, old_peer, new_peer = args
        sa = self.streams.get((account, name))
        if sa is None or old_peer not in sa.peers or new_peer in sa.peers:
            return []
        preferred = None if sa.preferred == old_peer else sa.preferred
        new_sa = dataclasses.replace(sa, peers=_swap_peer(sa.peers, old_peer, new_peer),
                                     preferred=preferred, reply=None)
        self.streams[sa.key] = new_sa
        changes = [_updated("stream_peers_changed", new_sa, sa)]
        for ca in self.consumers_of(account, name):
            if old_peer in ca.peers and new_peer not in ca.peers:
                new_ca = dataclasses.replace(ca, peers=_swap_peer(ca.peers, old_peer, new_peer), reply=None)
                self.consumers[ca.key] = new_ca
                changes.append(_updated("consumer_peers_changed", new_ca, ca))
        return changes

    def _apply_member_store(self, args: tuple[str, str]) -> list[MetaChange]:
        server, store = args
        old = self.stores.get(server)
        if old == store:
            return []
        self.stores[server] = store
        changes = [MetaChange("member_store", server=server)]
        if old is None:
            return changes
        # a removed server back with another store is a new server (meta_members)
        self.removed_servers.discard(server)
        # the server lost its store: its replicas are gone, their slots vacant (an R1
        # stream keeps its only peer: its data went with the store, it starts empty there)
        for sa in self.streams_on(server):
            if len(sa.peers) == 1:
                continue
            new_sa = dataclasses.replace(sa, peers=tuple(p for p in sa.peers if p != server),
                                         preferred=None if sa.preferred == server else sa.preferred,
                                         vacated=tuple(sorted({*sa.vacated, server})), reply=None)
            self.streams[sa.key] = new_sa
            changes.append(_updated("stream_peers_changed", new_sa, sa))
        for ca in self.consumers_on(server):
            if len(ca.peers) == 1:
                continue
            new_ca = dataclasses.replace(ca, peers=tuple(p for p in ca.peers if p != server), reply=None)
            self.consumers[ca.key] = new_ca
            changes.append(_updated("consumer_peers_changed", new_ca, ca))
        return changes

    def _apply_clear_vacated(self, args: tuple[str, str, str]) -> list[MetaChange]:
        account, name, server = args
        sa = self.streams.get((account, name))
        if sa is None or server not in sa.vacated:
            return []
        self.streams[sa.key] = dataclasses.replace(
            sa, vacated=tuple(v for v in sa.vacated if v != server), reply=None)
        return []

    def _apply_restore_state(self, args: tuple[str, str, str | None]) -> list[MetaChange]:
        account, name, state = args
        sa = self.streams.get((account, name))
        if sa is None or sa.restore is None or sa.restore == state:
            return []       # unknown, not restoring, or replayed: nothing changes
        if sa.restore == "catchup" and state == "data":
            return []       # phases only move on
        new = dataclasses.replace(sa, restore=state, reply=None)
        self.streams[sa.key] = new
        return [_updated("stream_updated", new, sa)]

    def _apply_add_stream_peer(self, args: tuple[str, str, str]) -> list[MetaChange]:
        account, name, peer = args
        sa = self.streams.get((account, name))
        if sa is None or peer in sa.peers or len(sa.peers) >= replicas_of(sa):
            return []
        new_sa = dataclasses.replace(sa, peers=(*sa.peers, peer), reply=None)
        self.streams[sa.key] = new_sa
        changes = [_updated("stream_peers_changed", new_sa, sa)]
        for ca in self.consumers_of(account, name):
            if peer not in ca.peers and len(ca.peers) < len(new_sa.peers):
                new_ca = dataclasses.replace(ca, peers=(*ca.peers, peer), reply=None)
                self.consumers[ca.key] = new_ca
                changes.append(_updated("consumer_peers_changed", new_ca, ca))
        return changes

    def _apply_remove_server(self, server: str) -> list[MetaChange]:
        if server in self.removed_servers:
            return []
        self.removed_servers.add(server)
        affected: list[Assignment] = [*self.streams_on(server), *self.consumers_on(server)]
        return [MetaChange("server_removed", server=server)] + [
            MetaChange("server_removed", a, server=server) for a in affected
        ]

    # --- queries

    def streams_on(self, server: str) -> list[StreamAssignment]:
        """The streams whose peers include ``server``, sorted by ``(account, name)``."""
        return [sa for _, sa in sorted(self.streams.items()) if server in sa.peers]

    def consumers_on(self, server: str) -> list[ConsumerAssignment]:
        """The consumers whose peers include ``server``, sorted by ``(account, stream, name)``."""
        return [ca for _, ca in sorted(self.consumers.items()) if server in ca.peers]

    def consumers_of(self, account: str, stream: str) -> list[ConsumerAssignment]:
        """The consumers of one stream, sorted by name."""
        return [ca for (a, s, _), ca in sorted(self.consumers.items()) if a == account and s == stream]

    def load(self) -> dict[str, int]:
        """RAFT groups (stream and consumer) per server name, for ``select_peers(load=...)``."""
        out: dict[str, int] = {}
        for a in [*self.streams.values(), *self.consumers.values()]:
            for peer in a.peers:
                out[peer] = out.get(peer, 0) + 1
        return out

    # --- snapshots

    def snapshot(self) -> bytes:
        """The whole state as bytes (module docstring); equal states give equal bytes."""
        return msgpack.packb({
            "v": SNAPSHOT_VERSION,
            "streams": [_stream_map(sa, with_reply=False) for _, sa in sorted(self.streams.items())],
            "consumers": [_consumer_map(ca, with_reply=False) for _, ca in sorted(self.consumers.items())],
            "removed": sorted(self.removed_servers),
            "stores": dict(sorted(self.stores.items())),
        }, use_bin_type=True)

    @classmethod
    def restore(cls, data: bytes) -> MetaState:
        """A state from :meth:`snapshot` bytes. Raises :class:`MetaEntryError` if they are malformed."""
        r = _Reader(_unpack(data, "meta snapshot"), "meta snapshot")
        version = r.num("v")
        if version != SNAPSHOT_VERSION:
            raise MetaEntryError(f"meta snapshot: unsupported version {version} (expected {SNAPSHOT_VERSION})")
        state = cls()
        for i, item in enumerate(r.seq("streams")):
            sa = _read_stream(_Reader(item, f"meta snapshot stream {i}"))
            state.streams[sa.key] = sa
        for i, item in enumerate(r.seq("consumers")):
            ca = _read_consumer(_Reader(item, f"meta snapshot consumer {i}"))
            if (ca.account, ca.stream) not in state.streams:
                raise MetaEntryError(f"meta snapshot consumer {i}: stream {ca.stream!r} is not in the snapshot")
            state.consumers[ca.key] = ca
        removed = r.seq("removed")
        if any(type(s) is not str for s in removed):
            raise MetaEntryError("meta snapshot: 'removed' must be a list of server names")
        state.removed_servers = set(removed)
        stores = r.data.get("stores", {}) if isinstance(r.data, dict) else {}
        if not isinstance(stores, dict) or any(type(k) is not str or type(v) is not str
                                               for k, v in stores.items()):
            raise MetaEntryError("meta snapshot: 'stores' must map server names to store ids")
        state.stores = dict(stores)
        return state

    def install_snapshot(self, data: bytes) -> list[MetaChange]:
        """Replace this state with a snapshot's; returns the difference (nats-server ``applyMetaSnapshot``).

        Removed streams come first (each after its consumers), then removed consumers,
        updated and added streams, updated and added consumers, newly removed servers;
        each group sorted by key. Raises :class:`MetaEntryError` before any change.
        """
        new = MetaState.restore(data)
        changes: list[MetaChange] = []
        for key, old_sa in sorted(self.streams.items()):
            if key not in new.streams:
                changes += [MetaChange("consumer_removed", ca) for ca in self.consumers_of(*key)]
                changes.append(MetaChange("stream_removed", old_sa))
        changes += [
            MetaChange("consumer_removed", ca) for key, ca in sorted(self.consumers.items())
            if key[:2] in new.streams and key not in new.consumers
        ]
        changes += _diff(self.streams, new.streams, "stream")
        changes += _diff(self.consumers, new.consumers, "consumer")
        changes += [MetaChange("server_removed", server=s)
                    for s in sorted(new.removed_servers - self.removed_servers)]
        self.streams, self.consumers, self.removed_servers = new.streams, new.consumers, new.removed_servers
        if new.stores != self.stores:
            changes += [MetaChange("member_store", server=s) for s in sorted(new.stores)
                        if self.stores.get(s) != new.stores[s]]
            self.stores = new.stores
        return changes


def _diff(old: dict[Any, Any], new: dict[Any, Any], kind: str) -> list[MetaChange]:
    """``<kind>_updated`` and ``<kind>_added`` rows from ``old`` to ``new``, sorted by key."""
    out: list[MetaChange] = []
    for key, a in sorted(new.items()):
        before = old.get(key)
        if before is None:
            out.append(MetaChange(f"{kind}_added", a))
        elif before != a:
            out.append(_updated(f"{kind}_updated", a, before))
    return out
