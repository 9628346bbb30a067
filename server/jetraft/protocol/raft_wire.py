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
    snapshot = [index, term, [peer, ...], data] or nil

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

from jetraft.raft.types import Entry, EntryType, Message, MessageType, Snapshot

__all__ = ["VERSION", "decode_batch", "encode_batch"]

#: The batch format version (the first element of every batch).
VERSION = 1

_MAX_INT = 1 << 64
_MESSAGE_FIELDS = 13
_ENTRY_TYPES = frozenset(int(t) for t in EntryType)
_MESSAGE_TYPES = {int(t): t for t in MessageType}
_NORMAL = EntryType.NORMAL


def encode_batch(messages: list[Message]) -> bytes:
    """Encode ``messages`` (of any groups, sources and destinations) as one batch."""
    strings: list[str] = []
    refs: dict[str, int] = {}

    def ref(name: str) -> int:
        k = refs.get(name)
        if k is None:
            k = refs[name] = len(strings)
            strings.append(name)
        return k

    out = []
    for m in messages:
        snap = m.snapshot
        row: list[Any] = [
            int(m.type), ref(m.group), ref(m.src), ref(m.dst),
            m.term, m.index, m.log_term, m.commit,
            [[e.term, e.index, int(e.type), e.data] for e in m.entries],
            m.reject, m.reject_hint, m.context,
            None if snap is None else [snap.index, snap.term, list(snap.peers), snap.data],
        ]
        n = _MESSAGE_FIELDS
        while n > 4 and not row[n - 1]:
            n -= 1
        out.append(row[:n] if n < _MESSAGE_FIELDS else row)
    return msgpack.packb([VERSION, strings, out], use_bin_type=True)


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
    return [_decode_message(k, row, strings) for k, row in enumerate(rows)]


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


def _decode_message(k: int, row: object, strings: list[str]) -> Message:
    f = _Fields(f"message {k}")
    if type(row) is not list or not 4 <= len(row) <= _MESSAGE_FIELDS:
        raise f.fail("message", f"an array of 4 to {_MESSAGE_FIELDS} fields", row)
    row = row + [0, 0, 0, 0, [], False, 0, b"", None][len(row) - 4:]
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
        s_index, s_term, peers, s_data = f.array("snapshot", raw_snap, 4)
        if type(peers) is not list or any(type(p) is not str for p in peers):
            raise f.fail("snapshot peers", "an array of strings", peers)
        snap = Snapshot(f.uint("snapshot index", s_index), f.uint("snapshot term", s_term),
                        tuple(peers), f.binary("snapshot data", s_data))
    return Message(
        t, f.ref("group", group, strings), f.ref("src", src, strings), f.ref("dst", dst, strings),
        term=f.uint("term", term), log_term=f.uint("log_term", log_term),
        index=f.uint("index", index), entries=entries, commit=f.uint("commit", commit),
        reject=reject, reject_hint=f.uint("reject_hint", reject_hint), snapshot=snap,
        context=f.binary("context", context),
    )


def _decode_entry(f: _Fields, j: int, raw: object) -> Entry:
    term, index, etype, data = f.array(f"entry {j}", raw, 4)
    if type(etype) is not int or etype not in _ENTRY_TYPES:
        raise f.fail(f"entry {j} type", "a known EntryType value", etype)
    return Entry(f.uint(f"entry {j} term", term), f.uint(f"entry {j} index", index),
                 _NORMAL if etype == _NORMAL else EntryType(etype), f.binary(f"entry {j} data", data))
