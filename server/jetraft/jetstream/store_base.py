"""What both stream message stores share, and the memory store.

The types a store answers with (:class:`StoredMessage`, :class:`StreamState`, the errors),
message sizes (:func:`msg_size`), and :class:`_IndexedStore`: the store interface (store,
load, purge, compact, state, ...) implemented on the in-memory index
(:mod:`jetraft.jetstream.store_index`), which both :class:`MemoryStore` (below: the index
holding the messages themselves) and :class:`~jetraft.jetstream.store.FileStore` (the index
over block files) derive from. Semantics, sizes and limits are described in
:mod:`jetraft.jetstream.store`, where these names are imported from; they follow nats-server
``server/store.go`` (``StoredMsg``, ``StreamState``) and ``server/memstore.go`` (``Purge``,
``PurgeEx``, ``Compact``, ``memStoreMsgSize``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

from jetraft.protocol.subjects import subject_matches
from jetraft.storage.group_commit import StorageError

from .store_index import Segment, SeqIndex

__all__ = ["MAX_DELETED_DETAILS", "MAX_SUBJECT_DETAILS", "CorruptMessage", "MemoryStore", "TooManyResults",
           "MessageNotFound", "StoredMessage", "StreamState", "msg_size"]


class MessageNotFound(KeyError):
    """No message with that sequence: never stored, removed, purged or compacted away."""


class TooManyResults(Exception):
    """A multi-last get matched more subjects than it may answer."""


class CorruptMessage(Exception):
    """The message's record failed its checksum; its contents are never returned."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One stream message: ``seq`` (1-based), ``headers`` the raw NATS header block or
    None, ``data`` the payload, ``ts`` ns since the epoch."""

    seq: int
    subject: str
    headers: bytes | None
    data: bytes
    ts: int


@dataclass(slots=True)
class StreamState:
    """A stream's state as STREAM.INFO reports it (nats-server ``StreamState``).

    ``bytes`` by :func:`msg_size`; ``*_ts`` ns since the epoch (``first_ts`` 0 when empty);
    ``num_deleted`` the sequences in [first_seq, last_seq] holding no message (lost ones
    included), always the true count; ``deleted`` the lowest :data:`MAX_DELETED_DETAILS`
    of those sequences, ascending, filled only when asked (partial when shorter than
    ``num_deleted``); ``subjects`` message count per subject, filled only when asked (one
    page of them: see ``subjects_total``); ``subjects_total`` how many subjects matched
    the filter asked for (0 when none was); ``lost`` sequences lost to corruption.
    """

    messages: int
    bytes: int
    first_seq: int
    first_ts: int
    last_seq: int
    last_ts: int
    num_subjects: int
    num_deleted: int
    deleted: list[int] = field(default_factory=list)
    subjects: dict[str, int] = field(default_factory=dict)
    lost: list[int] = field(default_factory=list)
    subjects_total: int = 0


def msg_size(subject: str, headers: bytes | None, data: bytes) -> int:
    """Bytes a message counts for, as nats-server ``filestore.go fileStoreMsgSize``:
    22 + subject + data + 8 checksum, plus 4 + headers when there are headers."""
    n = 30 + len(subject.encode("utf-8", "surrogateescape")) + len(data)
    return n + 4 + len(headers) if headers else n


def _matches_all(filt: str | None) -> bool:
    return not filt or filt == ">"


def _is_literal(subject: str) -> bool:
    return not any(t in ("*", ">") for t in subject.split("."))


#: Below this many sequences, num_pending walks the range instead of the subjects.
_WALK_RANGE = 2048

#: The most deleted sequences ``state(with_deleted=True)`` lists (STREAM.INFO
#: ``deleted_details``): the lowest ones, ascending, while ``num_deleted`` stays the true
#: count, so a client sees the list is partial when it is shorter. nats-server lists every
#: one (server/filestore.go ``State``), which for a stream restored with a gap of 10**8
#: sequences is gigabytes of memory and reply; jetraft takes nats-server's limit on subject
#: details (server/jetstream_api.go ``JSMaxSubjectDetails``) instead: at most about 2 MB of
#: JSON and a few ms of work on the event loop.
MAX_DELETED_DETAILS = 100_000
#: Subjects per page of ``state(subjects_filter=...)`` unless asked otherwise (nats-server
#: server/jetstream_api.go ``JSMaxSubjectDetails``).
MAX_SUBJECT_DETAILS = 100_000


class _IndexedStore:
    """The index both stores share (:class:`~jetraft.jetstream.store_index.SeqIndex`):
    per sequence its subject, size, ts and where to read it back, and per-subject ascending
    sequence lists. Subclasses implement the ``_log_*``/``_fetch`` hooks; every hook
    writes before the index changes, so a failed write changes nothing."""

    _WITH_OBJS = False

    def __init__(self) -> None:
        self._index = SeqIndex(self._WITH_OBJS)
        self._bytes = 0
        self._first = 1
        self._last = 0
        self._last_ts = 0
        self._lost: set[int] = set()
        self._closed = False

    # --- hooks -----------------------------------------------------------------------
    def _log_msg(self, seq: int, subject: str, headers: bytes | None, data: bytes,
                 ts: int) -> tuple:
        """Write the message; returns ``(owner, off, rsz, obj)`` for the index."""
        raise NotImplementedError

    def _log_tombstones(self, seqs: list[int]) -> None:
        raise NotImplementedError

    def _log_purge_below(self, seq: int) -> None:
        raise NotImplementedError

    def _fetch(self, seq: int, seg: Segment, i: int) -> StoredMessage:
        raise NotImplementedError

    def _on_dropped(self, owner) -> None:
        """Called for each message that left the index, with its segment's owner."""

    # --- index -----------------------------------------------------------------------
    def _add(self, seq: int, subject: str, size: int, ts: int, owner=None, off: int = 0,
             rsz: int = 0, obj=None) -> None:
        self._index.add(seq, subject, size, ts, owner, off, rsz, obj)
        self._bytes += size
        if seq > self._last:
            self._last, self._last_ts = seq, ts
        if len(self._index) == 1:
            self._first = seq

    def _drop(self, seq: int) -> None:
        _subject, size, owner = self._index.drop(seq)
        self._bytes -= size
        self._on_dropped(owner)

    def _fix_first(self) -> None:
        first = self._index.first_from(self._first) if self._index.count else None
        if first is None and self._index.count:
            first = self._index.first_from(0)
        self._first = first if first is not None else self._last + 1

    def _drop_below(self, seq: int) -> int:
        """Drop every message (and lost sequence) below ``seq``; returns messages dropped."""
        doomed = list(self._index.seqs(0, seq - 1))
        for s in doomed:
            self._drop(s)
        self._lost = {s for s in self._lost if s >= seq}
        return len(doomed)

    def _load(self, seq: int) -> StoredMessage:
        seg, i = self._index.slot(seq)
        if seg is None:
            raise MessageNotFound(seq)
        return self._fetch(seq, seg, i)

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the message store is closed")

    # --- API -------------------------------------------------------------------------
    def store(self, subject: str, headers: bytes | None, data: bytes, ts: int) -> int:
        """Append a message; returns its sequence (last_seq + 1). ``ts`` in ns since the
        epoch. FileStore: written to the OS, durable after the next :meth:`sync`."""
        self._check_open()
        seq = self._last + 1
        owner, off, rsz, obj = self._log_msg(seq, subject, headers, data, ts)
        self._add(seq, subject, self.msg_size(subject, headers, data), ts, owner, off, rsz, obj)
        return seq

    def skip_to(self, seq: int) -> None:
        """Make ``seq`` the last sequence used (durable after the next :meth:`sync`) when it
        is past the last one, so that the next message gets ``seq + 1``: the sequences
        between count as deleted (nats-server ``SkipMsgs``). Written as a tombstone of
        ``seq``. Used after a storage failure rolled back messages that were handed out
        sequence numbers but never acknowledged, so that no sequence is used twice, and by
        a restore (:meth:`store_at`)."""
        if seq <= self._last:
            return
        self._check_open()
        self._log_tombstones([seq])
        self._last = seq
        self._fix_first()

    def store_at(self, seq: int, subject: str, headers: bytes | None, data: bytes, ts: int) -> None:
        """Append a message at sequence ``seq`` (> last_seq) with its original ``ts`` (ns),
        the sequences skipped counting as deleted (a stream restore, jetstream/snapshot.py).
        On an empty store the first sequence moves to ``seq``. Raises ValueError when
        ``seq`` is not past the last sequence."""
        if seq <= self._last:
            raise ValueError(f"sequence {seq} is not past the last sequence {self._last}")
        if seq > self._last + 1:
            if len(self._index) == 0:
                self.compact_to(seq)
            else:
                self.skip_to(seq - 1)
        self.store(subject, headers, data, ts)

    def finish_restore(self, first_seq: int, last_seq: int) -> None:
        """After the last :meth:`store_at` of a restore: move the last sequence to
        ``last_seq`` (the stream's, which may be past its last message) and, for a store
        left empty, the first to ``first_seq`` (``last_seq + 1`` for an empty stream)."""
        if len(self._index) == 0:
            target = max(first_seq, last_seq + 1)
            if target > self._last + 1:
                self.compact_to(target)
            return
        self.skip_to(last_seq)

    @staticmethod
    def msg_size(subject: str, headers: bytes | None, data: bytes) -> int:
        """Bytes one message counts for in this store (FileStore: :func:`msg_size`)."""
        return msg_size(subject, headers, data)

    def sync(self, force: bool = False) -> None:
        """Make everything written so far durable (MemoryStore: nothing to do)."""

    def load(self, seq: int) -> StoredMessage:
        """The message ``seq``. Raises :class:`MessageNotFound` if there is none,
        :class:`CorruptMessage` if it was lost to corruption or fails its checksum now."""
        self._check_open()
        seg, i = self._index.slot(seq)
        if seg is None:
            if seq in self._lost:
                raise CorruptMessage(f"message {seq} was lost to a checksum mismatch")
            raise MessageNotFound(seq)
        return self._fetch(seq, seg, i)

    def load_next(self, subject_filter: str, start_seq: int) -> StoredMessage | None:
        """The first message with seq >= ``start_seq`` whose subject matches the filter
        (``*`` and ``>`` wildcards; "" or ">" match all), or None. Raises
        :class:`CorruptMessage` if that message fails its checksum."""
        self._check_open()
        start = max(start_seq, self._first)
        if start > self._last:
            return None
        if _matches_all(subject_filter):
            seq = self._index.first_from(start)
            return None if seq is None else self._load(seq)
        best = 0
        by_subject = self._index.by_subject
        for subj in self._matching_subjects(subject_filter):
            lst = by_subject[subj]
            i = bisect.bisect_left(lst, start)
            if i < len(lst) and (best == 0 or lst[i] < best):
                best = lst[i]
        return self._load(best) if best else None

    def load_last(self, subject: str) -> StoredMessage | None:
        """The last message on ``subject`` (a filter with wildcards is accepted too), or
        None. Raises :class:`CorruptMessage` if it fails its checksum."""
        self._check_open()
        seq = self.last_seq_for_subject(subject)
        return self._load(seq) if seq else None

    def last_seq_for_subject(self, subject: str) -> int:
        """The sequence of the last message on ``subject``, 0 if none."""
        by_subject = self._index.by_subject
        return max((by_subject[s][-1] for s in self._matching_subjects(subject)), default=0)

    def subject_of(self, seq: int) -> str | None:
        """The subject of message ``seq``, None when the store does not hold it (no I/O)."""
        return self._index.subject_of(seq)

    def num_pending(self, filters: tuple[str, ...] | list[str], start: int, last: int) -> int:
        """How many stored messages with ``start <= seq <= last`` match one of ``filters``
        (every message when ``filters`` is empty). A short range is walked; a long one costs
        two binary searches per matching subject."""
        if start > last:
            return 0
        if last - start < _WALK_RANGE:
            if not filters:
                return sum(1 for _ in self._index.seqs(start, last))
            subject_of = self._index.subject_of
            n = 0
            for seq in self._index.seqs(start, last):
                subject = subject_of(seq)
                if any(subject_matches(f, subject) for f in filters):
                    n += 1
            return n
        names: set[str] = set()
        for f in filters or (">",):
            names.update(self._matching_subjects(f))
        by_subject = self._index.by_subject
        n = 0
        for name in names:
            seqs = by_subject[name]
            n += bisect.bisect_left(seqs, last + 1) - bisect.bisect_left(seqs, start)
        return n

    def seq_from_time(self, ts: int) -> int:
        """The sequence of the first stored message at or after ``ts`` (ns since the epoch),
        last_seq + 1 when there is none (nats-server ``GetSeqFromTime``). A binary search
        over the sequences (messages' times grow with them): about log2(messages) loads."""
        self._check_open()
        lo, hi = self._first, self._last + 1         # the answer is in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            found = self.load_next(">", mid)
            if found is None:
                hi = mid
            elif found.ts >= ts:
                hi = min(mid, found.seq)
            else:
                lo = found.seq + 1
        nxt = self.load_next(">", lo) if lo <= self._last else None
        return nxt.seq if nxt is not None else self._last + 1

    def multi_last_seqs(self, filters: tuple[str, ...] | list[str], max_seq: int, limit: int) -> list[int]:
        """The sequence of the last message at or below ``max_seq`` of each subject matching
        one of ``filters``, ascending (nats-server ``MultiLastMsgs``). Raises
        :class:`TooManyResults` past ``limit`` subjects."""
        self._check_open()
        names: set[str] = set()
        for f in filters:
            names.update(self._matching_subjects(f))
        by_subject = self._index.by_subject
        seqs: list[int] = []
        for name in names:
            found = by_subject[name]
            i = bisect.bisect_right(found, max_seq)
            if i:
                seqs.append(found[i - 1])
                if len(seqs) > limit:
                    raise TooManyResults(limit)
        return sorted(seqs)

    def _matching_subjects(self, filt: str) -> list[str]:
        by_subject = self._index.by_subject
        if _matches_all(filt):
            return list(by_subject)
        if _is_literal(filt):
            return [filt] if filt in by_subject else []
        return [s for s in by_subject if subject_matches(filt, s)]

    def remove(self, seq: int) -> bool:
        """Delete message ``seq`` (STREAM.MSG.DELETE), durable as a tombstone record after
        the next sync. Returns False if there was no such message (a lost sequence is
        forgotten, also returning False). Moves first_seq when ``seq`` was the first."""
        self._check_open()
        if seq not in self._index:
            if seq in self._lost:
                self._log_tombstones([seq])
                self._lost.discard(seq)
            return False
        self._log_tombstones([seq])
        self._drop(seq)
        if seq == self._first:
            self._fix_first()
        return True

    def purge(self, subject: str | None = None, seq: int | None = None,
              keep: int | None = None) -> int:
        """Purge as nats-server ``memstore.go PurgeEx``; returns the number of messages
        purged. ``subject``: a filter (None, "" or ">" = the whole stream); ``seq``: purge
        only below it (exclusive); ``keep``: keep the ``keep`` newest matching messages.
        Whole stream with neither: everything goes, first_seq = last_seq + 1; with ``seq``
        (> 1): :meth:`compact_to`; with ``keep``: compact to last_seq - keep + 1. Raises
        ValueError when both ``seq`` and ``keep`` are given (nats-server refuses that
        request too)."""
        self._check_open()
        seq, keep = seq or 0, keep or 0
        if seq and keep:
            raise ValueError("purge: sequence and keep cannot both be set")
        if _matches_all(subject):
            if not seq and not keep:
                return self._purge_all()
            if seq > 1:
                return self.compact_to(seq)
            if keep:
                if keep >= len(self._index):
                    return 0
                return self.compact_to(self._last - keep + 1)
            return 0
        by_subject = self._index.by_subject
        seqs = sorted(s for subj in self._matching_subjects(subject) for s in by_subject[subj])
        if keep:
            if keep >= len(seqs):
                return 0
            seqs = seqs[:len(seqs) - keep]
        if seq > 1:
            seqs = seqs[:bisect.bisect_left(seqs, seq)]
        if not seqs:
            return 0
        self._log_tombstones(seqs)
        for s in seqs:
            self._drop(s)
        self._fix_first()
        return len(seqs)

    def _purge_all(self) -> int:
        n = len(self._index)
        if n == 0 and not self._lost:
            return 0
        self._log_purge_below(self._last + 1)
        self._drop_below(self._last + 1)
        self._first = self._last + 1
        return n

    def compact_to(self, seq: int) -> int:
        """Remove every message below ``seq``; returns how many (nats-server
        ``memstore.go Compact``). ``seq`` 0 purges everything. ``seq`` past last_seq + 1
        empties the stream and moves the sequences on: first_seq = ``seq``, last_seq =
        ``seq`` - 1, so the next message gets ``seq``."""
        self._check_open()
        if seq == 0:
            return self._purge_all()
        if seq > self._last + 1:
            n = len(self._index)
            self._log_purge_below(seq)
            self._drop_below(seq)
            self._last = seq - 1
            self._first = seq
            return n
        if seq <= self._first and not any(s < seq for s in self._lost):
            return 0
        self._log_purge_below(seq)
        n = self._drop_below(seq)
        self._first = max(self._first, seq)
        self._fix_first()
        return n

    @property
    def stored_bytes(self) -> int:
        """The bytes the stored messages count (``state().bytes``, without building the
        state)."""
        return self._bytes

    def last_sequence(self) -> int:
        """The stream's last sequence (``state().last_seq``, without building the state):
        what a consumer reads on every ack and every poll. Raises as :meth:`state` on a
        closed store."""
        self._check_open()
        return self._last

    def state(self, *, with_deleted: bool = False, subjects_filter: str | None = None,
              subjects_offset: int = 0,
              subjects_limit: int = MAX_SUBJECT_DETAILS) -> StreamState:
        """The stream's state. Without details it costs O(1) plus the lost sequences.

        ``with_deleted``: ``deleted`` lists the lowest :data:`MAX_DELETED_DETAILS` deleted
        sequences, ascending (``num_deleted`` is the true count); built from
        :meth:`deleted_runs`, so it costs O(cap + index segments), never O(size of a gap).
        ``subjects_filter`` (">" for all): ``subjects`` is one page of
        :meth:`subjects_page` (``subjects_offset``, ``subjects_limit``) and
        ``subjects_total`` the number of matching subjects."""
        self._check_open()
        n = len(self._index)
        first, last = self._first, self._last
        num_deleted = (last - first + 1 - n) if n else 0
        st = StreamState(messages=n, bytes=self._bytes, first_seq=first,
                         first_ts=self._index.ts_of(first) if n else 0, last_seq=last,
                         last_ts=self._last_ts, num_subjects=len(self._index.by_subject),
                         num_deleted=num_deleted, lost=sorted(self._lost))
        if with_deleted and num_deleted > 0:
            # a limit of num_deleted also stops the search once every one is found
            st.deleted = self._index.missing(first, last,
                                             limit=min(num_deleted, MAX_DELETED_DETAILS))
        if subjects_filter is not None:
            st.subjects_total, st.subjects = self.subjects_page(
                subjects_filter, subjects_offset, subjects_limit)
        return st

    def deleted_runs(self) -> Iterator[tuple[int, int]]:
        """The deleted sequences (in [first_seq, last_seq], holding no message, lost ones
        included) as ascending ``(first, last)`` runs, both inclusive, as long as
        possible. One step per index segment and per run, never one per sequence: a gap of
        10**12 sequences is one run (:meth:`SeqIndex.missing_runs
        <jetraft.jetstream.store_index.SeqIndex.missing_runs>`). Empty for an empty store.
        Do not change the store while iterating."""
        if not len(self._index):
            return iter(())
        return self._index.missing_runs(self._first, self._last)

    def stored_seqs(self, start: int, stop: int, *,
                    descending: bool = False) -> Iterator[int]:
        """The sequences in ``start .. stop`` (inclusive) that hold a message, ascending (or
        descending), without reading any message. One step per index segment and per
        sequence yielded, never one per sequence of a gap. Do not change the store while
        iterating."""
        if descending:
            return self._index.seqs_descending(start, stop)
        return self._index.seqs(start, stop)

    def subjects_state(self, subject_filter: str) -> dict[str, int]:
        """Message count per subject matching the filter ("" or ">" for all)."""
        by_subject = self._index.by_subject
        return {s: len(by_subject[s]) for s in self._matching_subjects(subject_filter)}

    def subjects_page(self, subject_filter: str, offset: int = 0,
                      limit: int = MAX_SUBJECT_DETAILS) -> tuple[int, dict[str, int]]:
        """``(total, page)``: how many subjects match the filter ("" or ">" for all) and the
        message counts of at most ``limit`` of them, from the ``offset``-th (0-based, a
        negative one counts as 0) in sorted order; ``{}`` past the end. As nats-server
        server/jetstream_api.go ``jsStreamInfoRequest`` pages ``SubjectsTotals``: finding
        and sorting the matching subjects is O(subjects log subjects), the page
        O(``limit``)."""
        by_subject = self._index.by_subject
        names = sorted(self._matching_subjects(subject_filter))
        offset = max(offset, 0)
        return len(names), {s: len(by_subject[s]) for s in names[offset:offset + limit]}

    def close(self) -> None:
        """Release resources. Does not sync: call :meth:`sync` first to keep writes."""
        self._closed = True


class MemoryStore(_IndexedStore):
    """The message store of a ``storage: memory`` stream; nothing survives the process."""

    _WITH_OBJS = True
    compression = "none"

    def set_compression(self, compression: str) -> None:
        """Keep the stream's ``compression`` and compress nothing: nats-server takes
        ``compression: s2`` on a memory stream and its memory store ignores it
        (server/memstore.go has no compression)."""
        self.compression = compression

    @staticmethod
    def msg_size(subject: str, headers: bytes | None, data: bytes) -> int:
        """nats-server ``memstore.go memStoreMsgSize``: subject + headers + data + 16."""
        return len(subject.encode("utf-8", "surrogateescape")) + len(headers or b"") + len(data) + 16

    def _log_msg(self, seq, subject, headers, data, ts):
        return None, 0, 0, StoredMessage(seq, subject, headers, bytes(data), ts)

    def _log_tombstones(self, seqs):
        pass

    def _log_purge_below(self, seq):
        pass

    def _fetch(self, seq, seg, i):
        return seg.objs[i]

