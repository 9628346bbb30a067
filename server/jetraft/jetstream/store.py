"""The jetraft stream message store: one interface, two implementations.

- :class:`MemoryStore` — messages held in memory (streams with ``storage: memory``).
- :class:`FileStore` — messages in checksummed block files (format in
  :mod:`jetraft.jetstream.store_format`), an in-memory index rebuilt on open, fsync batched
  through the server's shared :class:`~jetraft.storage.group_commit.GroupCommit`.

The index is columns of flat arrays per block (:mod:`jetraft.jetstream.store_index`), no
Python object per message. Opening walks each block and checks every record's checksums,
except a block with an index file (``NNN.idx``, written when a block of message records
only is sealed and when the store is closed): when the block's length and crc32 are still
the ones the index file names, its columns are read from there instead. On the machine the
figures in docs/ come from, opening 1,000,000 messages takes about 1.3 s walking and
0.27 s from index files.

Both share one index (:class:`_IndexedStore`), so their semantics are the same by
construction: sequence numbers start at 1 and only grow; ``first_seq`` is the lowest
stored sequence, or ``last_seq + 1`` when the stream is empty; ``last_seq`` never goes
down (a purge keeps it). Purge and compact follow nats-server ``memstore.go``
(``Purge``, ``PurgeEx``, ``Compact``). Message sizes (``StreamState.bytes``) are counted as
nats-server ``filestore.go fileStoreMsgSize`` does, in both implementations.

Durability (FileStore): ``store()``, ``remove()``, ``purge()`` and ``compact_to()`` write
to the OS at once (one ``pwrite`` each) and are durable after the next ``sync()`` (one
fsync per dirty file, shared with every other user of the GroupCommit). A crash loses at
most what was written after the last ``sync()``. Acknowledge a publish only after
``sync()`` returned (nats-server's ``sync_interval: always``; the lazy default lost
acknowledged messages in Jepsen's NATS 2.12.1 analysis, nats-server #7564).

Storage failures (FileStore): every write, truncation and fsync goes through
:mod:`jetraft.storage.fileio`. A write that fails (``ENOSPC``, ``EIO``, a short write) is
undone (the file is cut back to its length before it) and raises :class:`StorageError`
with the ``errno`` and ``path``; from then on the store is *failed* (:attr:`FileStore.failed`):
every write raises that error at once, reads go on. A failed fsync of one of its files
(reported by the GroupCommit's :class:`~jetraft.storage.group_commit.SyncFailed`) fails it too.
The store never recovers in place: :meth:`FileStore.reopen_verified` puts its files back
to what is provably on disk and returns a new store over them.

Corruption (FileStore, on open): every record carries crc32 checksums. A torn tail (the
end of the last block, left by a crash during a write) is truncated and reported. A
message whose checksum fails elsewhere is *lost*: reported in ``recovery_report``, listed in
``StreamState.lost`` and counted among the deleted sequences (``num_deleted``), never
served (``load`` raises :class:`CorruptMessage`), and its sequence is never reused. Every
other message stays readable. A checksum failure found later by ``load`` also raises
:class:`CorruptMessage`.
"""

from __future__ import annotations

import bisect
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from jetraft.protocol.subjects import subject_matches
from jetraft.storage import fileio
from jetraft.storage.group_commit import GroupCommit, StorageError, SyncFailed, SyncFile, storage_error

from . import store_format as fmt
from .admission import MAX_SEQ, MAX_TS, subject_problem
from .store_index import Segment, SeqIndex

__all__ = ["MAX_DELETED_DETAILS", "MAX_SUBJECT_DETAILS", "CorruptMessage", "FileStore",
           "MemoryStore", "MessageNotFound", "StoredMessage", "StreamState", "StorageError",
           "msg_size"]

DEFAULT_BLOCK_BYTES = 8 << 20


class MessageNotFound(KeyError):
    """No message with that sequence: never stored, removed, purged or compacted away."""


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


class _Block:
    """One open block file: ``live`` messages of the index it holds, ``external`` records
    it holds that affect earlier blocks (tombstones of lower sequences, purge markers);
    ``unsure``: a failed write could not be undone (bytes past ``size`` may remain);
    ``crc``: crc32 of its ``size`` bytes (None: not known); ``pure``: it holds message
    records only, in sequence (it may have an index file); ``indexed``: the size its index
    file was written for (-1: none)."""

    __slots__ = ("start", "path", "sf", "size", "live", "external", "unsure", "crc", "pure",
                 "indexed")

    def __init__(self, start: int, path: str, fd: int, size: int, owner=None,
                 crc: int | None = 0) -> None:
        self.start = start
        self.path = path
        self.sf = SyncFile(fd, path, owner=owner, size=size)
        self.size = size
        self.live = 0
        self.external = 0
        self.unsure = False
        self.crc = crc
        self.pure = True
        self.indexed = -1


class FileStore(_IndexedStore):
    """``FileStore(directory, *, sync, block_bytes=8 MiB, sync_always=True)``.

    ``sync``: the server's shared GroupCommit. ``block_bytes``: a new block is started when
    a message would take the last one past this size (bytes). ``sync_always`` False makes
    :meth:`sync` a no-op unless called with ``force=True`` (nats-server's lazy
    ``sync_interval``: the server's interval timer forces it); True (default) makes every
    ``sync()`` durable.

    Opening rebuilds the index from the blocks (see the module docstring for torn tails
    and checksum mismatches); ``recovery_report`` lists what was found, one dict per
    problem: ``{"file", "offset", "kind": "torn_tail" | "checksum_mismatch", "first_seq"}``
    (``first_seq``: the sequence the damaged record names, or the first sequence it may
    have held when its header was unreadable). Blocks whose messages are all gone are
    deleted after the next sync (the first block, or any block whose records affect no
    other block). Raises StorageError for a block of an unknown format version.
    """

    def __init__(self, directory: str | os.PathLike, *, sync: GroupCommit,
                 block_bytes: int = DEFAULT_BLOCK_BYTES, sync_always: bool = True) -> None:
        super().__init__()
        self.directory = os.fspath(directory)
        self.block_bytes = block_bytes
        self.sync_always = sync_always
        self.recovery_report: list[dict] = []
        self._gc = sync
        self._blocks: list[_Block] = []
        self._doomed: list[_Block] = []
        self._ready = False             # recovery done: blocks may be scheduled for deletion
        #: The StorageError that failed this store (see the module docstring), or None.
        self.failed: StorageError | None = None
        #: Set by :meth:`reopen_verified` on the store it returns: the last sequence found
        #: on disk, before ``skip_to`` moved past the rolled back ones.
        self.recovered_last: int | None = None
        self._blocks_walked = 0
        if not os.path.isdir(self.directory):
            fileio.make_dirs(self.directory)
            self._gc.mark_dir_dirty(os.path.dirname(os.path.abspath(self.directory)), self)
        self._recover()

    # --- recovery --------------------------------------------------------------------
    def _report(self, name: str, offset: int, kind: str, first_seq: int, detail: str) -> None:
        self.recovery_report.append({"file": name, "offset": offset, "kind": kind,
                                     "first_seq": first_seq, "detail": detail})

    def _recover(self) -> None:
        listing = os.listdir(self.directory)
        names = sorted(n for n in listing if fmt.parse_block_name(n) is not None)
        indexes = {fmt.parse_index_name(n): n for n in listing
                   if fmt.parse_index_name(n) is not None}
        for i, name in enumerate(names):
            is_last = i == len(names) - 1
            path = os.path.join(self.directory, name)
            with open(path, "rb") as f:
                buf = f.read()
            try:
                head = fmt.check_block_header(buf)
            except ValueError as exc:
                raise StorageError(f"{path}: {exc}") from exc
            start = fmt.parse_block_name(name)
            if head is not True:
                self._last = max(self._last, start - 1)
                if head is None and is_last:
                    self._report(name, 0, "torn_tail", start, "block header torn")
                    fileio.unlink(path)
                    self._gc.fsync_dir_now(self.directory)
                else:
                    self._report(name, 0, "checksum_mismatch", start,
                                 "damaged block header; block set aside as .corrupt")
                    fileio.replace(path, path + ".corrupt")
                    self._gc.fsync_dir_now(self.directory)
                continue
            fd = fileio.open_file(path, os.O_RDWR)
            blk = _Block(start, path, fd, len(buf), self, zlib.crc32(buf))
            self._blocks.append(blk)
            self._last = max(self._last, start - 1)
            if self._replay_index(blk, indexes.pop(start, None), buf):
                continue
            self._blocks_walked += 1
            off = self._replay_fast(blk, name, buf)
            if off == len(buf):
                continue
            blk.pure = False
            scan = fmt.scan_block(buf, is_last, off)
            if scan.end < len(buf):
                fileio.ftruncate(fd, scan.end, path)
                self._gc.fsync_now(fd, path)
                blk.size = scan.end
                blk.sf.truncated(scan.end)
                blk.crc = zlib.crc32(memoryview(buf)[:scan.end])
            events = sorted([(r.off, 0, r) for r in scan.records]
                            + [(d.offset, 1, d) for d in scan.damage],
                            key=lambda e: (e[0], e[1]))
            for _off, is_damage, ev in events:
                if is_damage:
                    self._report(name, ev.offset, ev.kind, ev.seq or self._last + 1,
                                 ev.detail)
                else:
                    self._replay(blk, ev, name, buf)
        for stale in indexes.values():     # of a block gone or set aside
            self._remove_index_file(stale)
        for n in listing:                   # an index write cut short
            if n.endswith(".idx.tmp"):
                self._remove_index_file(n)
        self._fix_first()
        self._ready = True
        for blk in list(self._blocks):
            self._maybe_free(blk)

    @property
    def blocks_walked(self) -> int:
        """How many blocks opening this store walked record by record (every record's
        checksums checked); the other blocks it opened were read from their index files."""
        return self._blocks_walked

    def _replay_index(self, blk: _Block, idx_name: str | None, buf: bytes) -> bool:
        """Index block ``buf`` from its index file when there is one that still describes
        it (same length and crc32, in sequence after what came before); True when done.
        An index file that does not is removed (it is rewritten when the block is sealed or
        the store closed)."""
        if idx_name is None:
            return False
        ix = None
        try:
            with open(os.path.join(self.directory, idx_name), "rb") as f:
                ix = fmt.decode_index(f.read())
        except OSError:
            pass
        n = len(ix.subj) if ix is not None else 0
        if ix is None or not n or ix.block_size != len(buf) or ix.block_crc != blk.crc \
                or ix.base != blk.start or self._last != ix.base - 1 \
                or fmt.BLOCK_HEADER_SIZE + sum(ix.rsz) != len(buf) \
                or any(subject_problem(name) is not None for name in ix.names) \
                or ix.base + n - 1 > MAX_SEQ:
            self._remove_index_file(idx_name)
            return False
        empty = not self._index.count
        seg = self._index.add_columns(ix.base, blk, ix.names, ix.subj, ix.size, ix.rsz, ix.ts,
                                      fmt.BLOCK_HEADER_SIZE)
        self._bytes += sum(seg.size)
        self._last, self._last_ts = ix.base + n - 1, ix.ts[-1]
        if empty:
            self._first = ix.base
        blk.live += n
        blk.indexed = len(buf)
        return True

    def _remove_index_file(self, name: str) -> None:
        try:
            fileio.unlink(os.path.join(self.directory, name))
        except OSError:
            pass

    def _write_index(self, blk: _Block) -> None:
        """Write the index file of ``blk`` when it holds message records only and has none
        for its size yet. A cache, never fsynced: a missing, torn or stale one only makes
        the next open walk the block (its length and crc32 are checked first)."""
        if not blk.pure or blk.crc is None or blk.unsure or blk.indexed == blk.size \
                or self.failed is not None:
            return
        seg = self._index.segment_of(blk)
        if seg is None or seg.padded or seg.base != blk.start or not len(seg.subj) \
                or fmt.BLOCK_HEADER_SIZE + sum(seg.rsz) != blk.size:
            return
        try:
            data = fmt.encode_index(fmt.BlockIndex(blk.size, blk.crc, seg.base, seg.names,
                                                   seg.subj, seg.size, seg.rsz, seg.ts))
        except OverflowError:
            return
        path = os.path.join(self.directory, fmt.index_name(blk.start))
        tmp = path + ".tmp"
        try:
            fd = fileio.open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, fileio.FILE_MODE)
            try:
                fileio.pwrite_all(fd, data, 0, tmp)
            finally:
                os.close(fd)
            fileio.replace(tmp, path)
        except OSError:
            self._remove_index_file(os.path.basename(tmp))
            return
        blk.indexed = blk.size

    def _replay_fast(self, blk: _Block, name: str, buf: bytes) -> int:
        """Replay the records of block ``buf`` from its header on, checking each one's
        checksums, until the end or the first record that is not whole or fails them
        (:func:`fmt.scan_block` then goes on from there); returns that offset. Messages in
        sequence go straight into the index's columns (the common case, inlined), any other
        record through :meth:`_replay`. One pass, no object per record."""
        index = self._index
        names: dict[bytes, tuple[int, object]] = {}
        hsize = fmt.HEADER_SIZE
        unpack = fmt.RECORD_HEADER.unpack_from
        crc32 = zlib.crc32
        mv = memoryview(buf)
        startswith = buf.startswith
        msg = fmt.REC_MSG
        size_all = len(buf)
        live = 0
        nbytes = 0
        last, last_ts = self._last, self._last_ts
        first_empty = not index.count
        prev_raw, prev_len, prev_sid, prev_list = b"", -1, 0, None
        seg = None
        seg_end = 0
        off = fmt.BLOCK_HEADER_SIZE
        try:
            while off < size_all:
                if size_all - off < hsize:
                    break
                hcrc, blen, seq, ts, rtype, flags, slen, hlen, _r, crc = unpack(buf, off)
                end = off + hsize + blen
                if end > size_all or slen + hlen > blen:
                    break
                hc = crc32(mv[off + 4:off + 36])
                if hc != hcrc or crc32(mv[off + hsize:end], hc) != crc:
                    break
                if seq > MAX_SEQ or ts > MAX_TS:
                    break               # _replay reports it (jetstream/admission.py)
                if rtype != msg or seq <= last or seq != seg_end:
                    self._end_run(blk, seg, live, nbytes, last, last_ts)
                    live = nbytes = 0
                    if rtype != msg or seq <= last:
                        blk.pure = False
                        self._replay(blk, fmt.Record(off, hsize + blen, rtype, seq, ts, flags,
                                                     slen, hlen), name, buf)
                        last, last_ts = self._last, self._last_ts
                        first_empty = not index.count
                        prev_len, prev_list = -1, None
                        seg, seg_end = None, 0
                        off = end
                        continue
                    seg = index.segment_for(seq, blk)
                    seg_end = seg.end
                    subj_a, size_a, ts_a = seg.subj.append, seg.size.append, seg.ts.append
                    off_a, rsz_a = seg.off.append, seg.rsz.append
                    names.clear()
                    prev_len, prev_list = -1, None
                a = off + hsize
                if slen == prev_len and startswith(prev_raw, a):
                    sid, lst = prev_sid, prev_list
                else:
                    raw = buf[a:a + slen]
                    got = names.get(raw)
                    if got is None:
                        subject = raw.decode("utf-8", "surrogateescape")
                        if subject_problem(subject) is not None:
                            break       # _replay reports it (jetstream/admission.py)
                        got = names[raw] = (seg.local_id(subject), index.seqs_of(subject))
                    sid, lst = got
                    prev_raw, prev_len, prev_sid, prev_list = raw, slen, sid, lst
                # 30 + subject + data (+ 4 + headers): msg_size, from the body length
                msize = 30 + blen + (4 if hlen else 0)
                subj_a(sid)
                size_a(msize)
                ts_a(ts)
                off_a(off)
                rsz_a(hsize + blen)
                lst.append(seq)
                seg_end += 1
                nbytes += msize
                live += 1
                last, last_ts = seq, ts
                if first_empty:
                    self._first = seq
                    first_empty = False
                off = end
        finally:
            mv.release()
        self._end_run(blk, seg, live, nbytes, last, last_ts)
        return off

    def _end_run(self, blk: _Block, seg: Segment | None, live: int, nbytes: int, last: int,
                 last_ts: int) -> None:
        """Account for the ``live`` messages (``nbytes`` bytes) :meth:`_replay_fast` just
        appended to ``seg``'s columns; ``last``/``last_ts``: the last of them."""
        self._last, self._last_ts, self._bytes = last, last_ts, self._bytes + nbytes
        self._index.count += live
        if seg is not None:
            seg.live += live
            seg.present.extend(b"\x01" * live)
        blk.live += live

    def _replay(self, blk: _Block, rec: fmt.Record, name: str, buf: bytes) -> None:
        if rec.gap and rec.rtype == fmt.REC_MSG:
            # damaged headers hid the records before this one: the message sequences
            # between cannot be more than the skipped bytes could hold
            hidden = range(self._last + 1, rec.seq)
            if 0 < len(hidden) <= rec.gap // fmt.HEADER_SIZE:
                self._lost.update(hidden)
        if rec.seq > MAX_SEQ:
            self._report(name, rec.off, "invalid_message", self._last + 1,
                         f"record sequence {rec.seq} is out of range; ignored")
            return
        if rec.rtype == fmt.REC_MSG:
            if rec.seq <= self._last:
                self._report(name, rec.off, "checksum_mismatch", rec.seq,
                             "message record out of sequence; ignored")
                return
            if not rec.ok:
                self._lost.add(rec.seq)
                self._last, self._last_ts = rec.seq, rec.ts
                return
            a = rec.off + fmt.HEADER_SIZE
            subject = buf[a:a + rec.subject_len].decode("utf-8", "surrogateescape")
            problem = subject_problem(subject)
            if problem is not None or rec.ts > MAX_TS:
                # what no publish could have stored (a forged or foreign block): lost, never
                # served; a replica fetches it again from a peer
                self._report(name, rec.off, "invalid_message", rec.seq,
                             f"subject {subject[:60]!r} {problem}" if problem
                             else f"timestamp {rec.ts} is out of range")
                self._lost.add(rec.seq)
                self._last = rec.seq
                return
            self._add(rec.seq, subject, self._size_of(rec), rec.ts, blk, rec.off, rec.size)
            blk.live += 1
        elif rec.rtype == fmt.REC_TOMBSTONE:
            if rec.seq < blk.start:
                blk.external += 1
            if rec.seq in self._index:
                self._drop(rec.seq)
            self._lost.discard(rec.seq)
            if rec.seq > self._last:        # skip_to: the sequences up to it are used
                self._last = rec.seq
        elif rec.rtype == fmt.REC_PURGE:
            blk.external += 1
            self._drop_below(rec.seq)
            if rec.seq - 1 > self._last:
                self._last, self._last_ts = rec.seq - 1, rec.ts
        else:
            self._report(name, rec.off, "checksum_mismatch", rec.seq,
                         f"unknown record type {rec.rtype}; ignored")

    @staticmethod
    def _size_of(rec: fmt.Record) -> int:
        n = 30 + rec.size - fmt.HEADER_SIZE
        return n + 4 if rec.headers_len else n

    # --- writing ---------------------------------------------------------------------
    def fail(self, exc: StorageError) -> StorageError:
        """Fail the store with ``exc`` (the first failure is kept; a caller whose shared
        sync pass reported one of this store's files calls it too); returns the error kept.
        Every later write raises it (see the module docstring)."""
        if self.failed is None:
            self.failed = exc
        return self.failed

    def _check_writable(self) -> None:
        self._check_open()
        if self.failed is not None:
            raise self.failed

    def _write(self, blk: _Block, buf: bytes | bytearray) -> int:
        """Append ``buf`` to ``blk`` (looping on short writes). On failure the bytes
        written are cut off again and the store fails (StorageError)."""
        off = blk.size
        try:
            fileio.pwrite_all(blk.sf.fd, buf, off, blk.path)
        except OSError as exc:
            try:
                fileio.ftruncate(blk.sf.fd, off, blk.path)
            except OSError:
                blk.unsure = True
            raise self.fail(storage_error("write", blk.path, exc)) from exc
        blk.size += len(buf)
        if blk.crc is not None:
            blk.crc = zlib.crc32(buf, blk.crc)
        self._gc.mark_dirty(blk.sf)
        return off

    def _new_block(self, start: int, data: bytes | bytearray) -> _Block:
        """Create the block named ``start`` holding ``data`` (its header and first
        records). Nothing changes when that fails (the file is removed again)."""
        path = os.path.join(self.directory, fmt.block_name(start))
        try:
            fd = fileio.open_file(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, fileio.FILE_MODE)
        except OSError as exc:
            raise self.fail(storage_error("create", path, exc)) from exc
        blk = _Block(start, path, fd, 0, self)
        try:
            self._write(blk, data)
        except StorageError:
            self._gc.forget(blk.sf)
            os.close(fd)
            try:
                fileio.unlink(path)
            except OSError:
                pass
            raise
        self._blocks.append(blk)
        self._gc.mark_dir_dirty(self.directory, self)
        return blk

    def _append(self, buf: bytearray, new_block_at: int = 0) -> tuple[_Block, int]:
        """Write ``buf`` (records) to the last block, first starting a new block named
        ``new_block_at`` if asked or if there is none. One pwrite."""
        blk = self._blocks[-1] if self._blocks else None
        if blk is None or new_block_at:
            prev = blk
            blk = self._new_block(new_block_at or self._last + 1, fmt.encode_block_header() + buf)
            if prev is not None:
                self._write_index(prev)
                self._maybe_free(prev)
            return blk, fmt.BLOCK_HEADER_SIZE
        return blk, self._write(blk, buf)

    def _log_msg(self, seq, subject, headers, data, ts):
        self._check_writable()
        buf = bytearray()
        fmt.encode_record(buf, fmt.REC_MSG, seq, ts, subject.encode("utf-8", "surrogateescape"),
                          headers, data)
        blk = self._blocks[-1] if self._blocks else None
        roll = blk is not None and blk.size > fmt.BLOCK_HEADER_SIZE and \
            blk.size + len(buf) > self.block_bytes
        blk, off = self._append(buf, seq if roll else 0)
        blk.live += 1
        return blk, off, len(buf), None

    def _log_tombstones(self, seqs):
        self._check_writable()
        buf = bytearray()
        for s in seqs:
            fmt.encode_record(buf, fmt.REC_TOMBSTONE, s, 0)
        blk, _ = self._append(buf)
        blk.pure = False
        blk.external += sum(1 for s in seqs if s < blk.start)

    def _log_purge_below(self, seq):
        self._check_writable()
        buf = bytearray()
        fmt.encode_record(buf, fmt.REC_PURGE, seq, self._last_ts)
        blk, _ = self._append(buf)
        blk.pure = False
        blk.external += 1

    def _on_dropped(self, blk):
        blk.live -= 1
        if blk.live == 0 and self._ready:
            self._maybe_free(blk)

    def _maybe_free(self, blk: _Block) -> None:
        """Schedule ``blk`` for deletion after the next sync if none of its records matter
        any more: no message left, not the last block, and first or without records that
        affect earlier blocks. Then try the block after it (it may have become first)."""
        blocks = self._blocks
        while True:
            if blk.live or blk is blocks[-1] or blk not in blocks:
                return
            i = blocks.index(blk)
            if i and blk.external:
                return
            del blocks[i]
            self._doomed.append(blk)
            if i != 0:
                return
            blk = blocks[0]

    def sync(self, force: bool = False, *, keep_doomed: bool = False) -> None:
        """Make everything written so far durable through the GroupCommit (one fsync per
        dirty file; the directory too after a block was created or deleted), then delete
        the blocks scheduled for deletion, unless ``keep_doomed`` (a clustered replica
        deletes them once a snapshot that no longer lists them is durable: see
        :meth:`manifest`). A no-op when ``sync_always`` is False and ``force`` is not set.
        Raises StorageError if one of this store's fsyncs fails (the store is failed from
        then on: see the module docstring); a failure of another owner's file is left to
        that owner."""
        self._check_writable()
        if not (self.sync_always or force):
            return
        try:
            self._gc.sync_owner(self)
        except SyncFailed as exc:
            raise self.fail(exc) from exc
        if not keep_doomed:
            self.delete_doomed(len(self._doomed))

    # --- the byte stream, for stream snapshots and catch-up (jetstream/catchup.py) -----
    def manifest(self) -> list[tuple[int, int]]:
        """The blocks that hold the store's state now, as ``[(first_seq, size_bytes), ...]``
        in name order (blocks scheduled for deletion left out). Records are only appended,
        blocks are started at the same sequences by every replica that applied the same
        operations (same ``block_bytes``), so a replica's blocks cut to these sizes hold
        exactly this state; bytes past them are later records."""
        return [(blk.start, blk.size) for blk in self._blocks]

    def read_block(self, first_seq: int, offset: int, n: int) -> bytes | None:
        """Up to ``n`` bytes of block ``first_seq`` from ``offset`` (fewer at its end), for a
        peer completing a snapshot: ``b""`` when the block does not reach ``offset`` (this
        replica is behind), None when this store has no such block (deleted once emptied,
        or not started yet). Raises OSError on a read error."""
        self._check_open()
        for blk in self._blocks + self._doomed:
            if blk.start == first_seq:
                if offset >= blk.size or offset < 0 or n <= 0:
                    return b""
                return os.pread(blk.sf.fd, min(n, blk.size - offset), offset)
        return b"" if first_seq > self._last else None

    def doomed_count(self) -> int:
        """How many emptied blocks wait for a sync before they may be deleted."""
        return len(self._doomed)

    def delete_doomed(self, n: int) -> None:
        """Delete the first ``n`` blocks scheduled for deletion. Call only after a sync of
        the shared GroupCommit that started after :meth:`doomed_count` returned ``n``
        (the records that emptied them are then durable); :meth:`sync` does it itself."""
        if self._closed:
            return
        doomed, self._doomed = self._doomed[:n], self._doomed[n:]
        for blk in doomed:
            self._gc.forget(blk.sf)
            os.close(blk.sf.fd)
            try:
                fileio.unlink(blk.path)
            except OSError:
                pass    # its records no longer matter (durably emptied): space, not data
            self._remove_index_file(fmt.index_name(blk.start))
        if doomed:
            self._gc.mark_dir_dirty(self.directory, self)

    # --- reading ---------------------------------------------------------------------
    def _fetch(self, seq, seg, i):
        blk, off, size = seg.owner, seg.off[i], seg.rsz[i]
        buf = os.pread(blk.sf.fd, size, off)
        got = fmt.read_header(buf, 0)
        if got is None or got[0].size != size or got[0].seq != seq \
                or got[0].rtype != fmt.REC_MSG or not fmt.body_ok(buf, got[0], got[1]):
            raise CorruptMessage(f"message {seq} fails its checksum ({blk.path}@{off})")
        subject, headers, data = fmt.decode_message(buf, got[0])
        return StoredMessage(seq, subject, headers, data, got[0].ts)

    def close(self) -> None:
        """Close the block files without syncing (call :meth:`sync` first to keep writes;
        closing without it is what a crash looks like to the files)."""
        if self._closed:
            return
        for blk in self._blocks:
            self._write_index(blk)
        self._closed = True
        self._gc.forget_owner(self)
        for blk in self._blocks + self._doomed:
            os.close(blk.sf.fd)
        self._blocks, self._doomed = [], []

    # --- after a storage failure -----------------------------------------------------
    def reopen_verified(self) -> FileStore:
        """A new FileStore over this store's directory holding exactly what is provably on
        disk, for a failed store to go on from. This store stays open (close it once the
        new one replaces it); call with no write to it in flight (a failed store takes
        none). Everything acknowledged is kept: an acknowledgement follows a successful
        fsync of the write, and nothing below a file's length at its last successful fsync
        is ever cut.

        1. A block whose fsync failed is cut to :attr:`SyncFile.durable` (what was written
           after its last successful fsync is not trusted: the kernel may have dropped it,
           PostgreSQL "fsyncgate"); a block never durably written is removed, and so is
           every block after it. A block whose failed write could not be undone is cut
           to the length written before that write.
        2. Every block and the directory are fsynced, and the blocks' pages dropped from
           the page cache (``posix_fadvise(DONTNEED)``), so the next step reads the device.
        3. The new store recovers from the files as at start-up (checksums, torn tails:
           ``recovery_report``). If it ends before this store's last sequence (messages
           rolled back), :meth:`skip_to` keeps sequences from being used twice, made
           durable before returning.

        Raises StorageError (with errno and path) when a step fails: retry later. May
        take long (it reads the whole store): run it off the event loop."""
        blocks = self._blocks
        try:
            cut_from = None
            for k, blk in enumerate(blocks):
                if blk.sf.failed is not None:
                    keep = blk.sf.durable
                elif blk.unsure:
                    keep = blk.size
                else:
                    continue
                if keep < fmt.BLOCK_HEADER_SIZE and blk.sf.failed is not None:
                    cut_from = k
                    break
                fileio.ftruncate(blk.sf.fd, keep, blk.path)
                if blk.sf.failed is not None:
                    cut_from = k + 1
                    break
            removed = blocks[cut_from:] if cut_from is not None else []
            for blk in reversed(removed):
                try:
                    fileio.unlink(blk.path)
                except FileNotFoundError:
                    pass
            kept = [b for b in blocks + self._doomed if b not in removed]
            for blk in kept:
                fileio.fdatasync(blk.sf.fd, blk.path)
            dfd = fileio.open_directory(self.directory)
            try:
                fileio.fsync_dir(dfd, self.directory)
            finally:
                os.close(dfd)
            for blk in kept:
                try:
                    os.posix_fadvise(blk.sf.fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except (AttributeError, OSError):
                    pass
        except OSError as exc:
            raise storage_error("rollback", getattr(exc, "filename", None) or self.directory,
                                exc) from exc
        fresh = FileStore(self.directory, sync=self._gc, block_bytes=self.block_bytes,
                          sync_always=self.sync_always)
        fresh.recovered_last = fresh._last
        if fresh._last < self._last:
            try:
                fresh.skip_to(self._last)
                fresh.sync(force=True)
            except StorageError:
                fresh.close()
                raise
        return fresh
