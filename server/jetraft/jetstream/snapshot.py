"""Stream backups: the ``$JS.API.STREAM.SNAPSHOT`` / ``$JS.API.STREAM.RESTORE`` requests and
the byte stream a snapshot is made of.

Protocol (nats-server ``server/jetstream_api.go`` ``jsStreamSnapshotRequest``,
``streamSnapshot``, ``jsStreamRestoreRequest``, ``processStreamRestore``):

- SNAPSHOT ``{deliver_subject, no_consumers?, chunk_size?, window_size?, jsck?}`` is answered
  ``{type, config, state}``; the data then goes to ``deliver_subject`` in chunks of
  ``chunk_size`` bytes (default 128 KiB, clamped to 1 KiB..1 MiB), each with the reply
  subject ``$JS.SNAPSHOT.ACK.<stream>.<id>.<chunk bytes>.<chunk index>`` that the client
  answers; at most ``window_size`` bytes (default 8 MiB, clamped to 1 KiB..32 MiB, at least
  one chunk) are unacknowledged. The last chunk, shorter than ``chunk_size``, has no
  reply subject. The end is an empty message without a reply subject, with the header
  ``NATS/1.0 204`` when whole chunks were sent (none when the data fit in one short
  chunk), or, after a failure, ``408 No Interest``, ``408 No Flow Response`` or
  ``500 <error>``.
- RESTORE ``{config, state}`` is answered ``{type, deliver_subject}`` with
  ``deliver_subject`` = ``$JS.SNAPSHOT.RESTORE.<stream>.<id>``; the client publishes the
  data there in chunks, each a request answered with an empty message (or, when the
  restore fails, a ``stream_create_response`` error); an empty message ends the data and is
  answered with the ``stream_create_response`` of the restored stream (its info) or an
  error 10062 ``restore failed: ...``.

Data format (jetraft's own; a snapshot taken by nats-server, an s2-compressed tar of its
file store, does not restore into jetraft, nor the other way round), version 1, sent and
kept in Snappy's framing format (:mod:`jetraft.jetstream.snapshot_frames`, which natscli's s2
reader reads)::

    MAGIC (8 bytes, b"JRSNAP\\x00\\x01")
    msgpack map   {"format": "jetraft-stream-snapshot", "version": 1,
                   "store": [first_seq, last_seq, messages, bytes],
                   "replica": <replica state: jetstream/replica_state.py>}
    msgpack array [seq, subject, headers (bin or nil), data (bin), ts (ns)]   per message,
                                                                         ascending seq
    msgpack map   {"end": true, "messages": count, "last_seq": last_seq}
    32 bytes      SHA-256 of everything before them

The consumers in ``replica`` are left out for ``no_consumers``. The store state is taken
when the snapshot starts, and so is every consumer's state; messages published while the
snapshot streams are past its ``last_seq`` and not part of it. Messages removed meanwhile
(deleted, expired, acknowledged from a work-queue) are absent from the data: they restore as
deleted sequences. A restore writes every message at its original sequence with its
subject, headers and timestamp, and keeps the first and last sequences (with the gaps).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgpack

from jetraft.protocol.bounded_msgpack import DecodeBudgetExceeded, Limits
from jetraft.protocol.bounded_msgpack import unpacker as bounded_unpacker
from jetraft.protocol.subjects import is_valid_literal_subject
from jetraft.storage import fileio

from . import errors as E
from .admission import MAX_SEQ, Admission, InadmissibleMessage, check_message
from .replica_state import build_replica_state
from .requests import bool_field, decode_request, int_field, str_field
from .store import CorruptMessage, FileStore, MemoryStore

__all__ = ["ACK_PREFIX", "DEFAULT_CHUNK", "DEFAULT_WINDOW", "FORMAT", "MAGIC", "RESTORE_PREFIX",
           "CorruptMessage", "RestoreResult", "SnapshotDataError", "SnapshotRequest", "SnapshotWriter",
           "build_restored_store", "check_messages", "clamp_window", "snapshot_request"]

MAGIC = b"JRSNAP\x00\x01"
FORMAT = "jetraft-stream-snapshot"
VERSION = 1
DIGEST_BYTES = 32
#: nats-server's chunk and window defaults and bounds (bytes).
DEFAULT_CHUNK = 128 * 1024
DEFAULT_WINDOW = 8 * 1024 * 1024
MIN_CHUNK, MAX_CHUNK = 1024, 1024 * 1024
MIN_WINDOW, MAX_WINDOW = 1024, 32 * 1024 * 1024
#: Subjects of the chunk acks and of a restore's deliver subject (nats-server jsSnapshotAckT,
#: jsRestoreDeliverT without their two last tokens).
ACK_PREFIX = "$JS.SNAPSHOT.ACK."
RESTORE_PREFIX = "$JS.SNAPSHOT.RESTORE."
#: Largest msgpack object a restore decodes (a message is at most max_payload, 64 MiB max).
_MAX_OBJECT = 80 * 1024 * 1024
#: Values the header (stream and consumer state) may hold, as counted by
#: :mod:`jetraft.protocol.bounded_msgpack` (a message record costs 13).
HEADER_MAX_VALUES = 2_000_000
#: What a restore decodes at most: one header or record (see HEADER_MAX_VALUES).
RESTORE_LIMITS = Limits(max_units=HEADER_MAX_VALUES, max_container=HEADER_MAX_VALUES,
                        max_str=1 << 20, max_bin=_MAX_OBJECT, max_buffer=_MAX_OBJECT)
_HEADER_KEYS = frozenset({"format", "version", "store", "replica"})
_END_KEYS = frozenset({"end", "messages", "last_seq"})


class SnapshotDataError(ValueError):
    """Snapshot data that cannot be restored; the message says what is wrong with it."""


@dataclass(slots=True)
class SnapshotRequest:
    """A checked SNAPSHOT request (``chunk_size``/``window_size`` clamped, bytes)."""

    deliver_subject: str
    no_consumers: bool
    chunk_size: int
    window_size: int
    check_msgs: bool


def clamp_window(chunk_size: int, window_size: int) -> tuple[int, int]:
    """nats-server's clamps: chunk 1 KiB..1 MiB (default 128 KiB), window 1 KiB..32 MiB
    (default 8 MiB), the window at least one chunk."""
    chunk = min(max(MIN_CHUNK, chunk_size or DEFAULT_CHUNK), MAX_CHUNK)
    window = min(max(MIN_WINDOW, window_size or DEFAULT_WINDOW), MAX_WINDOW)
    return chunk, max(window, chunk)


def snapshot_request(payload: bytes) -> SnapshotRequest:
    """Decode a ``JSApiStreamSnapshotRequest``. Raises JSApiError: 10003 for an empty body,
    10025 for bad JSON or a wrongly typed field, 10015 for a deliver subject that is not a
    valid publish subject."""
    req = decode_request(payload, "JSApiStreamSnapshotRequest")
    if not req:
        raise E.bad_request()
    go = "JSApiStreamSnapshotRequest"
    deliver = str_field(req, "deliver_subject", go)
    no_consumers = bool_field(req, "no_consumers", go)
    chunk = int_field(req, "chunk_size", go, "int")
    window = int_field(req, "window_size", go, "int")
    jsck = bool_field(req, "jsck", go)
    if not deliver or not is_valid_literal_subject(deliver):
        raise E.api_error("JSSnapshotDeliverSubjectInvalidErr")
    chunk, window = clamp_window(chunk, window)
    return SnapshotRequest(deliver, no_consumers, chunk, window, jsck)


class SnapshotWriter:
    """The bytes of one stream's snapshot, produced a little at a time from its store.

    ``stream``: the :class:`~jetraft.jetstream.stream.Stream`; ``consumers``: name ->
    Consumer (ignored when ``no_consumers``). The header (store and consumer state) is
    taken now; :meth:`read` then reads messages up to the last sequence of now, in order.
    :meth:`read` raises :class:`CorruptMessage` for a message that fails its checksum."""

    def __init__(self, stream: Any, consumers: dict[str, Any], *, no_consumers: bool) -> None:
        self.store = stream.store
        st = self.store.state()
        self.state = st
        replica = build_replica_state(stream, {} if no_consumers else consumers)
        self._next = st.first_seq
        self._last = st.last_seq
        self._hash = hashlib.sha256()
        self._buf = bytearray()
        self.messages = 0
        self.done = False
        self._emit(MAGIC)
        self._emit(msgpack.packb({"format": FORMAT, "version": VERSION,
                                  "store": [st.first_seq, st.last_seq, st.messages, st.bytes],
                                  "replica": replica}, use_bin_type=True))

    def _emit(self, data: bytes) -> None:
        self._hash.update(data)
        self._buf += data

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (exactly ``n`` unless at the end; b"" once everything was read).
        Reads as many messages as it takes, one at a time."""
        while len(self._buf) < n and not self.done:
            msg = self.store.load_next(">", self._next) if self._next <= self._last else None
            if msg is None or msg.seq > self._last:
                self._emit(msgpack.packb({"end": True, "messages": self.messages,
                                          "last_seq": self._last}, use_bin_type=True))
                self._buf += self._hash.digest()
                self.done = True
                break
            self._next = msg.seq + 1
            self.messages += 1
            self._emit(msgpack.packb([msg.seq, msg.subject, msg.headers, msg.data, msg.ts],
                                     use_bin_type=True))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


def check_messages(store: Any, start: int, last: int, limit: int) -> int:
    """Load up to ``limit`` messages from ``start`` (up to ``last``), checking each record's
    checksum; returns the next sequence to check (past ``last`` when done). Raises
    :class:`CorruptMessage` (the ``jsck`` of a SNAPSHOT request)."""
    seq = start
    for _ in range(limit):
        msg = store.load_next(">", seq) if seq <= last else None
        if msg is None or msg.seq > last:
            return last + 1
        seq = msg.seq + 1
    return seq


@dataclass(slots=True)
class RestoreResult:
    """What :func:`build_restored_store` wrote: the replica state of the snapshot's header,
    the store's first/last sequence and message count, bytes counted by the store."""

    replica: dict[str, Any]
    first_seq: int
    last_seq: int
    messages: int
    bytes: int
    store: Any = None       # the MemoryStore of a memory stream


class _Bounded:
    """A file read up to ``end`` bytes only (the digest after them is not data)."""

    def __init__(self, f: BinaryIO, end: int) -> None:
        self.f = f
        self.left = end

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n)
        self.left -= len(data)
        return data


def _verify_digest(path: str, size: int) -> None:
    if size < len(MAGIC) + DIGEST_BYTES:
        raise SnapshotDataError(f"snapshot data is truncated ({size} bytes)")
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise SnapshotDataError("not a jetraft stream snapshot (bad magic bytes; a nats-server "
                                    "backup does not restore into jetraft)")
        h.update(MAGIC)
        left = size - DIGEST_BYTES - len(MAGIC)
        while left > 0:
            block = f.read(min(left, 1 << 20))
            if not block:
                raise SnapshotDataError("snapshot data is truncated")
            h.update(block)
            left -= len(block)
        if f.read(DIGEST_BYTES) != h.digest():
            raise SnapshotDataError("snapshot data is corrupt or truncated (checksum mismatch)")


def _uint(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def build_restored_store(path: str, msgs_dir: str | None, *, max_bytes: int = 0,
                         admission: Admission = Admission()) -> RestoreResult:
    """Check the snapshot data in file ``path`` and write its messages into a new store:
    a FileStore in ``msgs_dir`` (made durable and closed), or a MemoryStore when
    ``msgs_dir`` is None (returned in the result). Blocking: run it in a worker thread.

    The data is decoded one value at a time within :data:`RESTORE_LIMITS` (the header at
    most :data:`HEADER_MAX_VALUES` values, see :mod:`jetraft.protocol.bounded_msgpack`),
    so memory stays bounded whatever the data holds. Every message passes
    :func:`jetraft.jetstream.admission.check_message` with ``admission`` (the subject and
    size limits of the restoring server and stream) before it is stored. Header and end
    record must have exactly their keys (fail closed).

    ``max_bytes`` (> 0): refuse data whose messages take more (the stream's or the account's
    storage limit). Raises :class:`SnapshotDataError` for data that is truncated, corrupt,
    not jetraft's, out of order, over a limit, or holding a message that no publish could
    have stored (``msgs_dir`` is then removed), OSError on a write failure (likewise)."""
    size = os.path.getsize(path)
    _verify_digest(path, size)
    store: Any = None
    try:
        with open(path, "rb") as f:
            f.seek(len(MAGIC))
            unpacker, budget = bounded_unpacker(_Bounded(f, size - DIGEST_BYTES - len(MAGIC)),
                                                RESTORE_LIMITS, "snapshot header")
            try:
                header = next(unpacker)
            except StopIteration:
                raise SnapshotDataError("snapshot data has no header") from None
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise SnapshotDataError("snapshot data has no jetraft header")
            if header.get("version") != VERSION:
                raise SnapshotDataError(f"snapshot format version {header.get('version')!r} "
                                        f"is not supported (expected {VERSION})")
            unknown = sorted(set(header) - _HEADER_KEYS)
            if unknown:
                raise SnapshotDataError(f"snapshot header has an unknown key {unknown[0][:40]!r}")
            st, replica = header.get("store"), header.get("replica")
            if not (isinstance(st, list) and len(st) == 4 and all(_uint(x) for x in st)
                    and isinstance(replica, dict)):
                raise SnapshotDataError("snapshot header is malformed")
            first_seq, last_seq = st[0], st[1]
            if last_seq > MAX_SEQ or first_seq > last_seq + 1:
                raise SnapshotDataError(f"snapshot header's sequences {first_seq}..{last_seq} "
                                        "are out of range")
            del header
            if msgs_dir is None:
                store = MemoryStore()
            else:
                from jetraft.storage.group_commit import GroupCommit
                store = FileStore(msgs_dir, sync=GroupCommit())
            count = 0
            end = None
            budget.what = "snapshot message record"
            while True:
                budget.reset()
                try:
                    obj = next(unpacker)
                except StopIteration:
                    break
                if isinstance(obj, dict):
                    end = obj
                    break
                if not (isinstance(obj, list) and len(obj) == 5 and _uint(obj[0])
                        and isinstance(obj[1], str) and (obj[2] is None or isinstance(obj[2], bytes))
                        and isinstance(obj[3], bytes) and _uint(obj[4])):
                    raise SnapshotDataError(f"snapshot message record {count + 1} is malformed")
                seq = obj[0]
                if seq <= store.state().last_seq or seq > last_seq or seq < first_seq:
                    raise SnapshotDataError(f"snapshot message sequence {seq} is out of order")
                try:
                    check_message(seq, obj[1], obj[2] or None, obj[3], obj[4], admission)
                except InadmissibleMessage as exc:
                    raise SnapshotDataError(f"snapshot {exc}") from None
                store.store_at(seq, obj[1], obj[2] or None, obj[3], obj[4])
                count += 1
                if max_bytes > 0 and store.stored_bytes > max_bytes:
                    raise SnapshotDataError(f"restored messages exceed the limit of {max_bytes} bytes")
            if end is None or end.get("end") is not True:
                raise SnapshotDataError("snapshot data is truncated (no end record)")
            if set(end) != _END_KEYS:
                raise SnapshotDataError("snapshot end record is malformed")
            if end.get("messages") != count or end.get("last_seq") != last_seq:
                raise SnapshotDataError("snapshot end record does not match its messages")
            budget.reset()
            if any(True for _ in unpacker):
                raise SnapshotDataError("snapshot data has bytes after its end record")
            store.finish_restore(first_seq, last_seq)
            state = store.state()
            if isinstance(store, FileStore):
                store.sync(force=True)
                store.close()
            return RestoreResult(replica, state.first_seq, state.last_seq, state.messages,
                                 state.bytes, store if msgs_dir is None else None)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        _discard(store, msgs_dir)
        if isinstance(exc, (SnapshotDataError, DecodeBudgetExceeded)):
            raise SnapshotDataError(str(exc)) from None
        raise SnapshotDataError(f"snapshot data is malformed: {exc}") from None
    except BaseException:
        _discard(store, msgs_dir)
        raise


def _discard(store: Any, msgs_dir: str | None) -> None:
    if isinstance(store, FileStore):
        store.close()
    if msgs_dir is not None:
        fileio.remove_tree(msgs_dir)

