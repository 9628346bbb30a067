"""The replicated state of one clustered stream replica, apart from its messages.

A clustered stream's RAFT group replays its log into every replica
(:mod:`jetraft.jetstream.replicated`); to compact that log, a snapshot must carry
everything that applying later entries reads, except the messages, which the stream's
store restores itself, byte for byte. This module gives that state's shape, builds it from
a stream and its consumers, and checks an untrusted copy before anything is changed
(nats-server keeps the same split: server/jetstream_cluster.go ``streamSnapshot`` holds the
store's state and the consumers are snapshotted by their own groups).

Shape (:data:`VERSION` 1), only dict (str keys), list, int, str, bool and None, so that it
survives ``msgpack.packb(use_bin_type=True)`` and JSON::

    {"version": 1,
     "stream": {"config": <StreamConfig JSON>, "created_ns": int,
                "last_seq": int, "last_msg_id": str,
                "dedupe": [[msg id, seq, ts ns], ...],           # oldest first
                "schedules": [[subject, seq, due ns], ...]},    # allow_msg_schedules only
     "consumers": [{"name": str, "config": <ConsumerConfig JSON>, "created_ns": int,
                    "state": <Consumer.replica_state()>}, ...]}  # the stream's order

The consumer ``state`` keys are those of :data:`_CONSUMER_FIELDS`; times are ns since the
epoch, sequences and counts are non-negative.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import JSApiError
from .model import ConsumerConfig, StreamConfig, is_valid_asset_name

__all__ = ["VERSION", "CheckedConsumer", "CheckedReplicaState", "ReplicaStateError",
           "build_replica_state", "check_consumer_state", "check_replica_state"]

VERSION = 1


class ReplicaStateError(ValueError):
    """A replica state that cannot be restored: its message names the field (a path such as
    ``consumers[2].state.pending[0][1]``) and what is wrong with it."""


# --- value checks -------------------------------------------------------------------------

Check = Callable[[Any, str], Any]


def _fail(where: str, want: str, value: Any) -> ReplicaStateError:
    return ReplicaStateError(f"replica state: {where} must be {want}, not {type(value).__name__}"
                             f" {_short(value)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(value: Any, where: str) -> int:
    """Any int (a time in ns may be any int64); bools are refused."""
    if type(value) is not int:
        raise _fail(where, "an integer", value)
    return value


def _nat(value: Any, where: str) -> int:
    if type(value) is not int or value < 0:
        raise _fail(where, "a non-negative integer", value)
    return value


def _bool(value: Any, where: str) -> bool:
    if type(value) is not bool:
        raise _fail(where, "a boolean", value)
    return value


def _str(value: Any, where: str) -> str:
    if type(value) is not str:
        raise _fail(where, "a string", value)
    return value


def _opt(check: Check) -> Check:
    def checked(value: Any, where: str) -> Any:
        return None if value is None else check(value, where)
    return checked


def _list(value: Any, where: str) -> list[Any]:
    if type(value) is not list:
        raise _fail(where, "a list", value)
    return value


def _list_of(check: Check) -> Check:
    def checked(value: Any, where: str) -> list[Any]:
        return [check(v, f"{where}[{i}]") for i, v in enumerate(_list(value, where))]
    return checked


def _tuple(*checks: Check) -> Check:
    def checked(value: Any, where: str) -> list[Any]:
        items = _list(value, where)
        if len(items) != len(checks):
            raise ReplicaStateError(f"replica state: {where} must have {len(checks)} items, "
                                    f"not {len(items)}")
        return [c(v, f"{where}[{i}]") for i, (c, v) in enumerate(zip(checks, items))]
    return checked


def _dict(value: Any, where: str, fields: Mapping[str, Check]) -> dict[str, Any]:
    """``value`` with exactly the keys of ``fields``, each checked (a new dict)."""
    if type(value) is not dict:
        raise _fail(where, "a map", value)
    missing = [k for k in fields if k not in value]
    if missing:
        raise ReplicaStateError(f"replica state: {where} lacks {missing[0]!r}")
    extra = [k for k in value if k not in fields]
    if extra:
        raise ReplicaStateError(f"replica state: {where} has an unknown key {_short(extra[0])}")
    return {k: check(value[k], f"{where}.{k}") for k, check in fields.items()}


def _unique(items: list[list[Any]], where: str) -> None:
    seen: set[Any] = set()
    for i, item in enumerate(items):
        if item[0] in seen:
            raise ReplicaStateError(f"replica state: {where}[{i}] repeats {_short(item[0])}")
        seen.add(item[0])


_WAITING = _tuple(_str, _int, _int, _int, _int, _int, _bool, _nat)
_PRIORITY_FIELDS = _tuple(_str, _int, _int, _str, _int)


def _waiting_request(value: Any, where: str) -> list[Any]:
    """A waiting pull request: 8 items, or 9 with its priority fields."""
    items = _list(value, where)
    if len(items) == 9:
        return _WAITING(items[:8], where) + [_PRIORITY_FIELDS(items[8], f"{where}[8]")]
    return _WAITING(items, where)


#: Consumer.replica_state() keys and their checks (see consumer.py for their meaning).
_CONSUMER_FIELDS: dict[str, Check] = {
    "sseq": _nat, "dseq": _nat, "adflr": _nat, "asflr": _nat,
    "st_dc": _nat, "st_ds": _nat, "st_ac": _nat, "st_as": _nat,
    "pending": _list_of(_tuple(_nat, _nat, _int)),              # [sseq, dseq, ts]
    "rdc": _list_of(_tuple(_nat, _int)),                         # [sseq, redeliveries]
    "rdq": _list_of(_nat),
    # [reply, n, max bytes, expires, heartbeat, next heartbeat, no_wait, delivered,
    #  (priority fields: [group, min_pending, min_ack_pending, pin id, priority])]
    "waiting": _list_of(_waiting_request),
    "lss": _opt(_list_of(_nat)), "lss_resume": _nat, "lss_undo": _opt(_tuple(_nat, _nat)),
    "npc": _nat, "seen_last": _nat, "npc_stale": _bool,
    "ldt": _opt(_int), "lat": _opt(_int),
    "acked": _list_of(_nat),
    "pcheck": _opt(_int), "pcheck_stale": _bool,
    "last_request": _int, "no_interest_since": _opt(_int),
    "active": _bool, "hb_next": _int,
    "pbytes": _nat, "fcid": _str, "fcsz": _nat, "pblimit": _nat, "maxpb": _nat,
    "fc_count": _nat,
    "dirty": _bool, "closed": _bool,
}
#: Keys a consumer's replica state may leave out (a consumer without a pace has none;
#: a snapshot of an older jetraft has no ``unpause_due``; one without priority groups, pin
#: or RAFT term seen has no ``priority``):
#: ``pace`` is [replay, lseq, last stored ts, due, stage, bucket credit, bucket filled at]
#: (consumer_pacing.py).
_CONSUMER_OPTIONAL: dict[str, Check] = {
    "pace": _tuple(_bool, _nat, _int, _nat, _nat, _int, _opt(_int)),
    "unpause_due": _bool,       # a pause set by an update has not ended yet (older snapshots lack it)
    # priority groups (consumer_priority.py): [pin id, pinned ts, timer due, group, pin term,
    # pins given, term]
    "priority": _tuple(_str, _opt(_int), _int, _str, _nat, _nat, _nat),
}


def check_consumer_state(value: Any, where: str = "consumer state") -> dict[str, Any]:
    """A checked copy of a :meth:`Consumer.replica_state` value (every key present but
    those of :data:`_CONSUMER_OPTIONAL`, which may be left out; no other; each of its
    type; pending and redelivery sequences unique; every waiting reply a non-empty
    subject). Raises :class:`ReplicaStateError` naming ``where`` and the key."""
    fields = dict(_CONSUMER_FIELDS)
    if type(value) is dict:
        fields.update({k: c for k, c in _CONSUMER_OPTIONAL.items() if k in value})
    state = _dict(value, where, fields)
    _unique(state["pending"], f"{where}.pending")
    _unique(state["rdc"], f"{where}.rdc")
    for i, wr in enumerate(state["waiting"]):
        if not wr[0]:
            raise ReplicaStateError(f"replica state: {where}.waiting[{i}][0] is an empty reply subject")
    return state


# --- the whole state ----------------------------------------------------------------------


def build_replica_state(stream: Any, consumers: Mapping[str, Any]) -> dict[str, Any]:
    """The state of ``stream`` (a :class:`~jetraft.jetstream.stream.Stream`) and its
    ``consumers`` (name -> :class:`~jetraft.jetstream.consumer.Consumer`, in order), in the
    shape of the module docstring. New lists and dicts throughout: later changes to the
    stream do not show in it."""
    return {
        "version": VERSION,
        "stream": {
            "config": stream.config.to_json(),
            "created_ns": stream.created_ns,
            "last_seq": stream.last_seq,
            "last_msg_id": stream.last_msg_id,
            "dedupe": [list(e) for e in stream.dedupe_entries()],
            **({"schedules": stream.schedules.to_state()} if stream.schedules is not None else {}),
        },
        "consumers": [{"name": name, "config": c.config.to_json(), "created_ns": c.created_ns,
                       "state": c.replica_state()} for name, c in consumers.items()],
    }


@dataclass(slots=True)
class CheckedConsumer:
    """One consumer of a checked replica state: its name, decoded and checked config,
    creation time (ns) and working state (:func:`check_consumer_state`)."""

    name: str
    config: ConsumerConfig
    created_ns: int
    state: dict[str, Any]


@dataclass(slots=True)
class CheckedReplicaState:
    """A replica state that passed :func:`check_replica_state`, with decoded configs."""

    config: StreamConfig
    created_ns: int
    last_seq: int
    last_msg_id: str
    dedupe: list[tuple[str, int, int]]
    consumers: list[CheckedConsumer]
    schedules: list[list[Any]] | None = None    # [[subject, seq, due ns], ...] (schedule.py)


def _any(value: Any, where: str) -> Any:
    return value


def _stream_config(value: Any, where: str) -> StreamConfig:
    if type(value) is not dict:
        raise _fail(where, "a map", value)
    try:
        cfg = StreamConfig.decode(value).checked()
        cfg.check_supported()
    except (JSApiError, ValueError, TypeError, KeyError) as exc:
        raise ReplicaStateError(f"replica state: {where} does not check: {exc}") from None
    return cfg


def _consumer_config(value: Any, where: str, stream: StreamConfig) -> ConsumerConfig:
    if type(value) is not dict:
        raise _fail(where, "a map", value)
    try:
        cfg = ConsumerConfig.decode(value).checked(stream)
        cfg.check_supported()
    except (JSApiError, ValueError, TypeError, KeyError) as exc:
        raise ReplicaStateError(f"replica state: {where} does not check: {exc}") from None
    return cfg


def check_replica_state(value: Any, stream_name: str, storage: str) -> CheckedReplicaState:
    """Check an untrusted replica state for stream ``stream_name`` whose store is of kind
    ``storage`` (``file``/``memory``): the version, every field's type, the stream config
    (nats-server ``checkStreamCfg``, settings jetraft acts on, same name and storage), each
    consumer config against it (``checkConsumerCfg``), consumer names (valid, unique, the
    config's name or durable name) and each consumer's working state
    (:func:`check_consumer_state`). Raises :class:`ReplicaStateError`; changes nothing."""
    if type(value) is not dict:
        raise _fail("the state", "a map", value)
    version = value.get("version")
    if type(version) is not int:
        raise _fail("version", "an integer", version)
    if version != VERSION:
        raise ReplicaStateError(f"replica state: version {version} is not known "
                                f"(this server reads version {VERSION})")
    top = _dict(value, "the state", {"version": _int, "stream": _any, "consumers": _list})
    stream_fields: dict[str, Check] = {
        "config": _any, "created_ns": _int, "last_seq": _nat, "last_msg_id": _str,
        "dedupe": _list_of(_tuple(_str, _nat, _int))}
    if type(top["stream"]) is dict and "schedules" in top["stream"]:
        stream_fields["schedules"] = _list_of(_tuple(_str, _nat, _int))
    st = _dict(top["stream"], "stream", stream_fields)
    cfg = _stream_config(st["config"], "stream.config")
    if cfg.name != stream_name:
        raise ReplicaStateError(f"replica state: stream.config.name is {cfg.name!r}, "
                                f"not the stream {stream_name!r}")
    if cfg.storage != storage:
        raise ReplicaStateError(f"replica state: stream.config.storage is {cfg.storage!r}, "
                                f"but the stream's store is {storage!r}")
    consumers: list[CheckedConsumer] = []
    names: set[str] = set()
    for i, raw in enumerate(top["consumers"]):
        where = f"consumers[{i}]"
        c = _dict(raw, where, {"name": _str, "config": _any, "created_ns": _int, "state": _any})
        name = c["name"]
        if not is_valid_asset_name(name):
            raise ReplicaStateError(f"replica state: {where}.name {_short(name)} is not a valid "
                                    f"consumer name")
        if name in names:
            raise ReplicaStateError(f"replica state: {where}.name {name!r} is repeated")
        names.add(name)
        ccfg = _consumer_config(c["config"], f"{where}.config", cfg)
        if name not in (ccfg.name, ccfg.durable_name):
            raise ReplicaStateError(f"replica state: {where}.name {name!r} is neither the "
                                    f"config's name nor its durable name")
        consumers.append(CheckedConsumer(name, ccfg, c["created_ns"],
                                         check_consumer_state(c["state"], f"{where}.state")))
    return CheckedReplicaState(cfg, st["created_ns"], st["last_seq"], st["last_msg_id"],
                               [(m, s, t) for m, s, t in st["dedupe"]], consumers,
                               st.get("schedules"))
