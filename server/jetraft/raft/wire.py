"""The RAFT wire codec, sans I/O: a batch of :class:`~jetraft.raft.types.Message` as msgpack.

One batch carries the messages of many RAFT groups from one server to another (the RAFT
host coalesces everything a processing pass sends to a peer into one batch, so the
heartbeats of a thousand groups cost one route frame). The transport frames the bytes;
this module only turns messages into bytes and back.

Layout (msgpack, arrays rather than maps; integers are unsigned, < 2**64)::

    batch    = [VERSION, strings, messages]
    strings  = [str, ...]                      # every group and server name, once
    message  = [type, group, src, dst,         # type: MessageType value; group/src/dst:
                term, index, log_term, commit, #   indexes into ``strings``
                entries, reject, reject_hint, context, snapshot]
    entry    = [term, index, type, data]       # type: EntryType value; data: bin
    snapshot = [index, term, [peer, ...], data] or [..., [learner, ...]] or nil

A message's trailing fields that hold their default (0, ``[]``, ``false``, ``b""``, nil)
are left out, so a heartbeat is ``[7, g, s, d, term, 0, 0, commit]``. Field meanings are
those of :class:`~jetraft.raft.types.Message` (etcd raftpb.Message).

:func:`decode_batch` trusts nothing: every field is type- and range-checked and anything
malformed (truncated bytes, wrong types, unknown message or entry types, bad string
references, an unknown version) raises :class:`ValueError` naming the message and field.
"""

from __future__ import annotations

from typing import Any

import msgpack

from .types import Entry, EntryType, Message, MessageType, Snapshot

__all__ = ["VERSION", "decode_batch", "encode_batch"]

#: The batch format version (the first element of every batch).
VERSION = 1

_MAX_INT = 1 << 64
_MESSAGE_FIELDS = 13
_ENTRY_TYPE_OF = {int(t): t for t in EntryType}
_MESSAGE_TYPES = {int(t): t for t in MessageType}
#: Defaults of the fields after ``dst``, for a message whose trailing fields were left out.
_DEFAULTS: list[Any] = [0, 0, 0, 0, [], False, 0, b"", None]


def encode_batch(messages: list[Message]) -> bytes:
    """Encode ``messages`` (of any groups, sources and destinations) as one batch."""
    refs: dict[str, int] = {}
    ref = refs.setdefault
    out = []
    for m in messages:
        row: list[Any] = [m.type, ref(m.group, len(refs)), ref(m.src, len(refs)),
                          ref(m.dst, len(refs)), m.term, m.index, m.log_term, m.commit]
        snap = m.snapshot
        if m.entries or m.reject or m.reject_hint or m.context or snap is not None:
            row += ([[e.term, e.index, e.type, e.data] for e in m.entries],
                    m.reject, m.reject_hint, m.context,
                    None if snap is None else _encode_snapshot(snap))
        while len(row) > 4 and not row[-1]:
            row.pop()
        out.append(row)
    return msgpack.packb([VERSION, list(refs), out], use_bin_type=True)


def decode_batch(data: bytes) -> list[Message]:
    """Decode a batch made by :func:`encode_batch`. Raises ValueError if it is malformed."""
    try:
        top = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many kinds; all mean malformed
        raise ValueError(f"raft batch: not valid msgpack: {exc}") from exc
    if type(top) is not list or len(top) != 3:
        raise ValueError("raft batch: expected [version, strings, messages]")
    version, strings, rows = top
    if version != VERSION or type(version) is not int:
        raise ValueError(f"raft batch: unsupported version {version!r} (expected {VERSION})")
    if type(strings) is not list or any(type(s) is not str for s in strings):
        raise ValueError("raft batch: the string table must be a list of strings")
    if type(rows) is not list:
        raise ValueError("raft batch: messages must be a list")
    ns = len(strings)
    out = []
    for k, row in enumerate(rows):
        # The fast path accepts only what _decode_message accepts; it explains the rest.
        if type(row) is list and 4 <= len(row) <= _MESSAGE_FIELDS:
            if len(row) < _MESSAGE_FIELDS:
                row = row + _DEFAULTS[len(row) - 4:]
            (mtype, group, src, dst, term, index, log_term, commit,
             raw_entries, reject, hint, context, raw_snap) = row
            t = _MESSAGE_TYPES.get(mtype) if type(mtype) is int else None
            if (t is not None and type(mtype) is int and type(group) is int
                    and type(src) is int and type(dst) is int
                    and 0 <= min(group, src, dst) and max(group, src, dst) < ns
                    and type(term) is int and type(index) is int and type(log_term) is int
                    and type(commit) is int and type(hint) is int
                    and 0 <= min(term, index, log_term, commit, hint)
                    and max(term, index, log_term, commit, hint) < _MAX_INT
                    and type(reject) is bool and type(context) is bytes and raw_snap is None
                    and type(raw_entries) is list):
                entries = _fast_entries(raw_entries) if raw_entries else ()
                if entries is not None:
                    out.append(Message(t, strings[group], strings[src], strings[dst], term,
                                       log_term, index, entries, commit, reject, hint, None,
                                       context))
                    continue
        out.append(_decode_message(k, row, strings))
    return out


def _fast_entries(rows: list) -> tuple[Entry, ...] | None:
    """Entries that pass every check of _decode_entry, or None to take the slow path."""
    out = []
    types = _ENTRY_TYPE_OF
    for raw in rows:
        if type(raw) is not list or len(raw) != 4:
            return None
        term, index, etype, data = raw
        if not (type(term) is int and type(index) is int and type(etype) is int
                and type(data) is bytes and 0 <= term < _MAX_INT and 0 <= index < _MAX_INT):
            return None
        t = types.get(etype)
        if t is None:
            return None
        out.append(Entry(term, index, t, data))
    return tuple(out)


class _Fields:
    """Checks the fields of one message, naming it in errors."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, field: str, want: str, got: object) -> ValueError:
        return ValueError(f"raft batch: {self.where}: {field}: expected {want}, "
                          f"got {type(got).__name__} {got!r:.40}")

    def uint(self, field: str, v: object) -> int:
        if type(v) is not int or not 0 <= v < _MAX_INT:
            raise self.fail(field, "an unsigned 64-bit int", v)
        return v

    def ref(self, field: str, v: object, strings: list[str]) -> str:
        if type(v) is not int or not 0 <= v < len(strings):
            raise self.fail(field, f"an index into the string table (size {len(strings)})", v)
        return strings[v]

    def binary(self, field: str, v: object) -> bytes:
        if type(v) is not bytes:
            raise self.fail(field, "bytes", v)
        return v

    def array(self, field: str, v: object, size: int | None = None) -> list:
        if type(v) is not list or (size is not None and len(v) != size):
            raise self.fail(field, "an array" + (f" of {size}" if size is not None else ""), v)
        return v


def _encode_snapshot(snap: Snapshot) -> list:
    out = [snap.index, snap.term, list(snap.peers), snap.data]
    if snap.learners:
        out.append(list(snap.learners))
    return out


def _decode_message(k: int, row: object, strings: list[str]) -> Message:
    """The slow path: every check spelled out, with an error naming the field."""
    f = _Fields(f"message {k}")
    if type(row) is not list or not 4 <= len(row) <= _MESSAGE_FIELDS:
        raise f.fail("message", f"an array of 4 to {_MESSAGE_FIELDS} fields", row)
    row = row + _DEFAULTS[len(row) - 4:]
    (mtype, group, src, dst, term, index, log_term, commit,
     raw_entries, reject, reject_hint, context, raw_snap) = row
    t = _MESSAGE_TYPES.get(mtype) if type(mtype) is int else None
    if t is None:
        raise f.fail("type", "a known MessageType value", mtype)
    if type(reject) is not bool:
        raise f.fail("reject", "a bool", reject)
    entries = tuple(_decode_entry(f, j, e) for j, e in enumerate(f.array("entries", raw_entries)))
    snap = None
    if raw_snap is not None:
        if type(raw_snap) is not list or len(raw_snap) not in (4, 5):
            raise f.fail("snapshot", "an array of 4 or 5", raw_snap)
        s_index, s_term, peers, s_data, *rest = raw_snap
        learners = rest[0] if rest else []
        for name, names in (("snapshot peers", peers), ("snapshot learners", learners)):
            if type(names) is not list or any(type(p) is not str for p in names):
                raise f.fail(name, "an array of strings", names)
        snap = Snapshot(f.uint("snapshot index", s_index), f.uint("snapshot term", s_term),
                        tuple(peers), f.binary("snapshot data", s_data), tuple(learners))
    return Message(
        t, f.ref("group", group, strings), f.ref("src", src, strings), f.ref("dst", dst, strings),
        term=f.uint("term", term), log_term=f.uint("log_term", log_term),
        index=f.uint("index", index), entries=entries, commit=f.uint("commit", commit),
        reject=reject, reject_hint=f.uint("reject_hint", reject_hint), snapshot=snap,
        context=f.binary("context", context),
    )


def _decode_entry(f: _Fields, j: int, raw: object) -> Entry:
    term, index, etype, data = f.array(f"entry {j}", raw, 4)
    t = _ENTRY_TYPE_OF.get(etype) if type(etype) is int else None
    if t is None:
        raise f.fail(f"entry {j} type", "a known EntryType value", etype)
    return Entry(f.uint(f"entry {j} term", term), f.uint(f"entry {j} index", index), t,
                 f.binary(f"entry {j} data", data))
