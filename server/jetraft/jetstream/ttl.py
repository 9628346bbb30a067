"""Per-message TTL (nats-server 2.11, ADR-43), sans-IO: which stored messages expire when.

A stream with ``allow_msg_ttl`` keeps a :class:`TtlIndex` of the messages stored with a
``Nats-TTL`` header: each one's expiry (its timestamp + the TTL, ns) in a heap, and the
messages whose TTL is ``never`` (they outlive ``max_age``, nats-server memstore.go
expireMsgs). The stream removes the messages that are due when its timer runs (a cluster's
leader decides the time: the replicated tick's timestamp, so every replica removes the
same messages). The index is saved beside the stream's messages (``ttl.idx``, written with
the consumers' state) with the highest sequence it covers; opened again, it is read back
and only the messages stored after that sequence are looked at, never the whole stream
(nats-server keeps its time hash wheel in the stream's state the same way).

Each entry carries the message's timestamp: an entry whose sequence now holds another
message (or none) is dropped, never acted on.
"""

from __future__ import annotations

import heapq
from typing import Any

import msgpack

from jetraft.protocol import headers as hdr

from .store import CorruptMessage, MessageNotFound

__all__ = ["TtlIndex", "MSG_TTL_HEADER", "NEVER"]

#: The header a message's TTL comes in (nats-server JSMessageTTL).
MSG_TTL_HEADER = "Nats-TTL"
#: The expiry of a message whose TTL is ``never``.
NEVER = -1
#: Nanoseconds in a second.
_SECOND = 1_000_000_000
#: The saved form's version.
_VERSION = 1


class TtlIndex:
    """The TTL'd messages of one stream: ``seq -> (expiry ns or NEVER, timestamp ns)``.

    ``covered``: the highest sequence whose message was looked at (stored through
    :meth:`add` or read by :meth:`scan`); ``dirty``: changed since :meth:`to_bytes` last
    ran."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[int, int]] = {}
        self._heap: list[tuple[int, int]] = []
        self.covered = 0
        self.dirty = False

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, seq: int, ttl_s: int, ts: int) -> None:
        """Message ``seq`` stored at ``ts`` (ns) with a TTL of ``ttl_s`` seconds (-1:
        never; 0: none, nothing is kept)."""
        self.covered = max(self.covered, seq)
        self.dirty = True
        if ttl_s == 0:
            return
        expires = NEVER if ttl_s < 0 else ts + ttl_s * _SECOND
        self._entries[seq] = (expires, ts)
        if expires != NEVER:
            heapq.heappush(self._heap, (expires, seq))

    def never(self, seq: int) -> bool:
        """Whether message ``seq`` was stored with TTL ``never`` (max_age passes it by)."""
        entry = self._entries.get(seq)
        return entry is not None and entry[0] == NEVER

    def next_expiry(self) -> int | None:
        """The earliest expiry (ns) still indexed, or None."""
        heap = self._heap
        while heap and self._entries.get(heap[0][1], (None,))[0] != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due(self, now_ns: int, limit: int) -> list[tuple[int, int]]:
        """Take up to ``limit`` entries expired at ``now_ns``: ``(seq, timestamp)`` in
        expiry order (the caller removes the message if it is still the one stored)."""
        out: list[tuple[int, int]] = []
        heap = self._heap
        while heap and len(out) < limit:
            expires, seq = heap[0]
            entry = self._entries.get(seq)
            if entry is None or entry[0] != expires:
                heapq.heappop(heap)
                continue
            if expires > now_ns:
                break
            heapq.heappop(heap)
            del self._entries[seq]
            self.dirty = True
            out.append((seq, entry[1]))
        return out

    def forget(self, seq: int) -> None:
        """Message ``seq`` is gone (removed by something else)."""
        if self._entries.pop(seq, None) is not None:
            self.dirty = True

    def scan(self, store: Any, parse_ttl: Any) -> int:
        """Index the messages of ``store`` after :attr:`covered` (``parse_ttl(text)`` ->
        ``(seconds, invalid)``); returns how many were read. Corrupt records are passed by."""
        st = store.state()
        n = 0
        start = max(self.covered + 1, st.first_seq)
        for seq in store.stored_seqs(start, st.last_seq):
            n += 1
            try:
                sm = store.load(seq)
            except (MessageNotFound, CorruptMessage):
                continue
            ttl = 0
            if sm.headers:
                try:
                    text = hdr.parse(sm.headers).get(MSG_TTL_HEADER) or ""
                except hdr.HeaderError:
                    text = ""
                ttl, invalid = parse_ttl(text)
                ttl = 0 if invalid else ttl
            self.add(seq, ttl, sm.ts)
        self.covered = max(self.covered, st.last_seq)
        return n

    def to_bytes(self) -> bytes:
        """The saved form: ``[version, covered, [[seq, expiry, ts], ...]]``; clears
        :attr:`dirty`."""
        self.dirty = False
        return msgpack.packb([_VERSION, self.covered, [[s, e, t] for s, (e, t) in self._entries.items()]])

    @classmethod
    def from_bytes(cls, data: bytes, last_seq: int) -> TtlIndex:
        """The index :meth:`to_bytes` saved, for a store whose last sequence is
        ``last_seq`` now (entries past it are dropped, the covered sequence lowered to it).
        Raises ValueError when ``data`` is not such a form (the caller scans instead)."""
        try:
            item = msgpack.unpackb(data, raw=False)
        except Exception as exc:  # noqa: BLE001 - msgpack raises several types
            raise ValueError(f"undecodable TTL index: {exc}") from None
        if not (isinstance(item, list) and len(item) == 3 and item[0] == _VERSION
                and isinstance(item[1], int) and isinstance(item[2], list)):
            raise ValueError("TTL index is not [version, covered, entries]")
        out = cls()
        for e in item[2]:
            if not (isinstance(e, list) and len(e) == 3 and all(isinstance(v, int) for v in e)
                    and e[0] > 0 and (e[1] == NEVER or e[1] > 0)):
                raise ValueError("TTL index has a bad entry")
            if e[0] <= last_seq:
                out._entries[e[0]] = (e[1], e[2])
                if e[1] != NEVER:
                    out._heap.append((e[1], e[0]))
        heapq.heapify(out._heap)
        out.covered = min(max(item[1], 0), last_seq)
        return out
