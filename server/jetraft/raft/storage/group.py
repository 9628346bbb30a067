"""GroupLog: one RAFT group's durable log in its own directory.

Implements the read protocol :class:`jetraft.raft.types.Storage` and the write side the
driver uses to persist a ``Ready`` (etcd raft storage.go / MemoryStorage; etcd wal/ for the
file discipline). Files in the directory: segments ``NNNNNNNNNNNNNNNNNNNN.log``
(:mod:`.wal`), ``hardstate`` and ``snapshot`` (:mod:`.meta`).

Indexes are RAFT log indexes (from 1); sizes are bytes. Readable entries are
``(snapshot.index, last_index()]``. Durability comes from the shared :class:`GroupCommit`:
writes reach the OS at once and become durable at the next ``GroupCommit.sync()``.
Snapshots and a snapshot's discard of the log are made durable before the call returns.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_right
from dataclasses import dataclass

from jetraft.raft.memory import apply_membership
from jetraft.raft.types import (
    CompactedError,
    ConfigChange,
    CorruptRangeError,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    UnavailableError,
)
from jetraft.storage import fileio
from jetraft.storage.group_commit import (
    GroupCommit,
    StorageError,
    SyncFile,
    storage_error,
)

from . import meta, wal

#: Holds the commit index a corrupt log lost (decimal text), until the log is repaired.
WATERMARK_FILE = "commit-watermark"

DEFAULT_SEGMENT_BYTES = 64 << 20
DEFAULT_CACHE_BYTES = 8 << 20
_CACHE_OVERHEAD = 64          # bytes charged per cached entry on top of its data


class _Segment:
    __slots__ = ("first", "path", "fd", "size", "prev_crc", "sf", "unsure")

    def __init__(self, first: int, path: str, fd: int, size: int, prev_crc: int, owner=None):
        self.first, self.path, self.fd, self.size, self.prev_crc = first, path, fd, size, prev_crc
        self.sf = SyncFile(fd, path, owner=owner, size=size)
        self.unsure = False     # a failed write could not be rolled back: bytes past size


@dataclass(slots=True)
class _Corruption:
    """The log is corrupt from index ``lo`` (an estimate of its end: ``hi``, exclusive).
    The first bad bytes are at ``offset`` of segment ``seg`` (0 = the whole file) and would
    have held entry ``cut``; 0 = nothing before ``lo`` can be kept on repair."""

    lo: int
    hi: int
    seg: int
    offset: int
    cut: int


class GroupLog:
    """One group's log. Shapes:

    ``GroupLog(directory, *, sync, segment_bytes=64 MiB, peers=(), cache_bytes=8 MiB,
    sync_commit=False)``: opens or creates the log in ``directory``; ``peers`` seeds a
    brand-new group (ignored when the directory holds state). Recovery on open truncates a
    torn tail and marks a corrupt range; what it found is in ``recovery_report`` (a list of
    dicts ``{file, offset, kind, first_index, detail}``; kinds "torn_tail",
    "checksum_mismatch", "commit_clamped", "stale_log_discarded",
    "snapshot_checksum_mismatch").

    A hard-state change of term or vote is fsynced at the next ``sync()``; a change of
    commit alone is written but not forced (etcd rawnode.go ``MustSync``: commit is
    re-learned from the leader), unless ``sync_commit``. After a crash the recovered commit
    is therefore at most the last one set, and never above ``last_index()``.

    Raises :class:`StorageError` for an unknown file format or an unreadable hard state
    (term and vote cannot be repaired from peers: a node that forgot its vote may vote
    twice in a term, Raft §5.2).
    """

    def __init__(self, directory: str | os.PathLike, *, sync: GroupCommit,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, peers: tuple[str, ...] = (),
                 cache_bytes: int = DEFAULT_CACHE_BYTES, sync_commit: bool = False) -> None:
        self.directory = os.fspath(directory)
        self.recovery_report: list[dict] = []
        self._watermark = 0
        self._sync = sync
        self._segment_bytes = segment_bytes
        self._cache_limit = cache_bytes
        self._sync_commit = sync_commit
        self._closed = False
        #: The StorageError that stopped this log (a failed write or truncation); every
        #: later write raises it. A failed fsync is reported by the GroupCommit instead.
        self.failed: StorageError | None = None
        self._segs: list[_Segment] = []
        self._firsts: list[int] = []
        self._base = 1
        self._terms = array("Q")
        self._offs = array("Q")
        self._crcs = array("I")
        self._lens = array("I")
        self._tail_crc = 0
        self._bad: _Corruption | None = None
        self._confs: list[tuple[int, ConfigChange]] = []
        self._cache: list[Entry] = []
        self._cache_lo = 1
        self._compacted = self._compacted_term = 0
        self._cache_bytes = 0
        self._hs = HardState()
        self._hs_seq = 0
        self._hs_durable_slot = 1
        self._hs_written_slot = 1
        self._hs_lazy = False
        self._hs_sf: SyncFile | None = None
        fileio.make_dirs(self.directory)
        self._open(tuple(peers))

    # ------------------------------------------------------------------ recovery

    def _report(self, path: str, offset: int, kind: str, index: int, detail: str) -> None:
        self.recovery_report.append({"file": path, "offset": offset, "kind": kind,
                                     "first_index": index, "detail": detail})

    def _open(self, peers: tuple[str, ...]) -> None:
        d = self.directory
        names = os.listdir(d)
        for name in names:
            if name.endswith(".tmp"):
                fileio.unlink(os.path.join(d, name))
        firsts = sorted(f for f in map(wal.parse_segment_name, names) if f is not None)
        self._load_hard_state()
        raw_mark = meta.read_file(os.path.join(d, WATERMARK_FILE))
        if raw_mark is not None and raw_mark.strip().isdigit():
            self._watermark = int(raw_mark)
        snap_path = os.path.join(d, meta.SNAPSHOT_FILE)
        raw = meta.read_file(snap_path)
        snap_bad = False
        if raw is None and not firsts and meta.HARDSTATE_FILE not in names:
            self._snap = Snapshot(0, 0, peers)
            meta.write_atomic(d, meta.SNAPSHOT_FILE, meta.encode_snapshot(self._snap),
                              self._sync)
        else:
            try:
                if raw is None:
                    raise ValueError("snapshot file missing")
                self._snap = meta.decode_snapshot(raw)
            except ValueError as exc:
                if "not supported" in str(exc):
                    raise StorageError(f"{snap_path}: {exc}") from exc
                self._report(snap_path, 0, "snapshot_checksum_mismatch", 1, str(exc))
                self._snap = Snapshot(0, 0, peers)
                snap_bad = True
        s = self._snap.index
        self._compacted, self._compacted_term = s, self._snap.term
        while len(firsts) >= 2 and firsts[1] <= s + 1:       # left over from a compaction
            self._unlink(os.path.join(d, wal.segment_name(firsts.pop(0))))
        self._base = firsts[0] if firsts else s + 1
        self._scan_segments(firsts, snap_bad)
        self._confs = [c for c in self._confs if c[0] > s]
        if not self._terms and (self._bad is not None or not self._segs):
            self._base = s + 1
        last = self._base + len(self._terms) - 1
        if self._bad is None and firsts and (last < s or (
                self._base <= s and self._terms[s - self._base] != self._snap.term)):
            self._report(d, 0, "stale_log_discarded", self._base,
                         "the log does not hold the snapshot's last entry")
            self._discard_all()
        self._tail_crc = self._crcs[-1] if self._crcs else (
            self._segs[0].prev_crc if self._segs else 0)
        if self._bad is not None and self._bad.lo <= s:      # bad bytes before the snapshot
            self._bad.lo = s + 1
            self._bad.hi = max(self._bad.hi, s + 2)
            self._truncate_arrays(self._base)
            self._base = s + 1
        self._cache_lo = self.last_index() + 1
        last = self.last_index()
        if self._hs.commit > last:
            self._report(os.path.join(d, meta.HARDSTATE_FILE), 0, "commit_clamped", last + 1,
                         f"hard state commit {self._hs.commit} is past the last readable "
                         f"entry {last}; entries are re-fetched from peers")
            # Remember how far this node once knew the log committed: until it holds that
            # much again it must not help elect a leader whose log ends earlier.
            self._watermark = max(self._watermark, self._hs.commit)
            meta.write_atomic(d, WATERMARK_FILE, b"%d\n" % self._watermark, self._sync)
            # persisted, or a later reopen would trust the old commit for new entries
            self._write_hard_state(HardState(self._hs.term, self._hs.vote, last), True)
        self._drop_watermark_if_repaired()

    def _load_hard_state(self) -> None:
        path = os.path.join(self.directory, meta.HARDSTATE_FILE)
        raw = meta.read_file(path)
        if raw is None:
            return
        found = meta.decode_hard_state(raw)
        if found is None:
            if any(raw):
                raise StorageError(f"{path}: no hard state slot passes its checksum; "
                                   "refusing to start without term and vote")
            self._report(path, 0, "torn_tail", 0, "hard state file creation was torn")
        else:
            slot, self._hs_seq, self._hs = found
            self._hs_durable_slot = self._hs_written_slot = slot
        self._open_hard_state_file()

    def _open_hard_state_file(self) -> None:
        path = os.path.join(self.directory, meta.HARDSTATE_FILE)
        try:
            fd = fileio.open_file(path, os.O_RDWR | os.O_CREAT, fileio.FILE_MODE)
        except OSError as exc:
            raise storage_error("open", path, exc) from exc
        self._hs_sf = SyncFile(fd, path, self._hard_state_synced, owner=self,
                               size=os.fstat(fd).st_size)

    def _scan_segments(self, firsts: list[int], snap_bad: bool) -> None:
        s = self._snap.index
        expected: int | None = None
        prev_crc = 0
        for k, first in enumerate(firsts):
            path = os.path.join(self.directory, wal.segment_name(first))
            is_last = k == len(firsts) - 1
            with open(path, "rb") as f:
                buf = f.read()
            try:
                header = wal.decode_segment_header(buf)
            except ValueError as exc:
                raise StorageError(f"{path}: {exc}") from exc
            if header is None and is_last and (len(buf) < wal.SEGMENT_HEADER_SIZE
                                               or not any(buf)):
                self._report(path, 0, "torn_tail", first, "segment header incomplete")
                self._unlink(path)
                return
            seg = self._add_segment(first, path, len(buf), header[1] if header else 0)
            if snap_bad:
                problem = wal.Problem("checksum_mismatch", 0, 1, "snapshot unreadable")
            elif header is None or header[0] != first:
                problem = wal.Problem("checksum_mismatch", 0, expected or first,
                                      "segment header checksum mismatch")
            elif expected is None and first > s + 1:
                problem = wal.Problem("checksum_mismatch", 0, s + 1,
                                      f"log starts at {first}, after snapshot index {s}")
            elif expected is not None and (first != expected or header[1] != prev_crc):
                problem = wal.Problem("checksum_mismatch", 0, expected,
                                      "segment does not continue the log before it")
            else:
                scan = wal.scan_segment(buf, first, header[1], is_last)
                self._terms.extend(scan.terms)
                self._offs.extend(scan.offsets)
                self._crcs.extend(scan.crcs)
                self._lens.extend(scan.lens)
                for index, data in scan.configs:
                    try:
                        self._confs.append((index, ConfigChange.decode(data)))
                    except ValueError:
                        pass        # a malformed change has no effect on membership
                expected = first + len(scan.terms)
                prev_crc = scan.last_crc
                problem = scan.problem
                if problem is not None and problem.kind == "torn_tail":
                    self._report(path, problem.offset, problem.kind, problem.index,
                                 problem.detail)
                    self._truncate(seg, problem.offset)
                    self._sync.fsync_now(seg.fd, seg.path)
                    problem = None
            if problem is not None:
                self._report(path, problem.offset, problem.kind, problem.index, problem.detail)
                hi = wal.highest_index_after(buf, problem.offset or wal.SEGMENT_HEADER_SIZE)
                for later in firsts[k + 1:]:
                    lpath = os.path.join(self.directory, wal.segment_name(later))
                    with open(lpath, "rb") as f:
                        lbuf = f.read()
                    hi = max(hi, later, wal.highest_index_after(lbuf, wal.SEGMENT_HEADER_SIZE))
                    self._add_segment(later, lpath, len(lbuf), 0)
                cut = 0 if snap_bad else problem.index
                self._bad = _Corruption(problem.index, max(hi, problem.index) + 1, k,
                                        problem.offset, cut)
                if snap_bad:
                    self._base = 1
                return

    def _add_segment(self, first: int, path: str, size: int, prev_crc: int) -> _Segment:
        fd = fileio.open_file(path, os.O_RDWR)
        seg = _Segment(first, path, fd, size, prev_crc, self)
        self._segs.append(seg)
        self._firsts.append(first)
        return seg

    # ------------------------------------------------------------------ read side

    def initial_state(self) -> tuple[HardState, tuple[str, ...]]:
        """The stored hard state, with commit clamped into [snapshot.index, last_index()]
        (see recovery_report "commit_clamped"), and the peers: the snapshot's, changed by
        the CONFIG_CHANGE entries after it (thesis §4.1: the latest configuration in the
        log is in effect, committed or not)."""
        hs = self._hs
        commit = max(self._snap.index, min(hs.commit, self.last_index()))
        if commit != hs.commit:
            hs = HardState(hs.term, hs.vote, commit)
        return hs, self._membership()[0]

    def initial_learners(self) -> tuple[str, ...]:
        """The latest configuration's learners (as the peers of :meth:`initial_state`)."""
        return self._membership()[1]

    def _membership(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        voters, learners = self._snap.peers, self._snap.learners
        for index, cc in self._confs:
            voters, learners = apply_membership(
                voters, learners, Entry(0, index, EntryType.CONFIG_CHANGE, cc.encode()))
        return voters, learners

    def first_index(self) -> int:
        """The first readable index: last compacted index + 1 (compact(), apply_snapshot();
        create_snapshot() alone does not move it, as etcd MemoryStorage). After reopening,
        snapshot.index + 1."""
        return self._compacted + 1

    def last_index(self) -> int:
        """The last readable index (before any corrupt range); snapshot.index if empty."""
        return self._base + len(self._terms) - 1

    def disk_bytes(self) -> int:
        """Bytes of the log's segment files (the entries kept, compacted ones in a segment
        not yet deleted included; the hardstate and snapshot files not)."""
        return sum(seg.size for seg in self._segs)

    def snapshot(self) -> Snapshot:
        """The latest snapshot (index 0, term 0, the group's first peers if none taken)."""
        return self._snap

    def _missing(self, index: int, lo: int | None = None) -> Exception:
        """The error for reading [lo, index] past last_index()."""
        bad = self._bad
        if bad is not None and bad.lo <= index and (index if lo is None else lo) < bad.hi:
            return CorruptRangeError(bad.lo, bad.hi, f"group log {self.directory}")
        return UnavailableError(f"index {index} is past the last index {self.last_index()}")

    def term(self, index: int) -> int:
        """The term at ``index`` (at first_index() - 1: the term of the last compacted
        entry, the snapshot's after a reopen; 0 at index 0 of an empty log).

        Raises CompactedError below first_index() - 1, CorruptRangeError in a corrupt range,
        UnavailableError past last_index()."""
        c = self._compacted
        if index == c:
            return self._compacted_term
        if index < c:
            raise CompactedError(f"index {index} is compacted (first index {c + 1})")
        if index > self.last_index():
            raise self._missing(index)
        return self._terms[index - self._base]

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries with index in [lo, hi): at least one if lo < hi, then as many as fit in
        ``max_bytes`` (sum of ``len(entry.data)``; None = no limit).

        Raises CompactedError if lo < first_index(), CorruptRangeError if the range
        reaches a corrupt range (or a record fails its checksum when read), UnavailableError
        if hi > last_index() + 1. Returns [] if lo >= hi."""
        if lo <= self._compacted:
            raise CompactedError(f"index {lo} is compacted (first index {self._compacted + 1})")
        if hi > self.last_index() + 1:
            raise self._missing(hi - 1, lo)
        if lo >= hi:
            return []
        if max_bytes is not None and hi - lo > 1:
            lens, base = self._lens, self._base
            total = lens[lo - base]
            end = lo + 1
            while end < hi:
                total += lens[end - base]
                if total > max_bytes:
                    break
                end += 1
            hi = end
        cache_lo = self._cache_lo
        if lo >= cache_lo:
            return self._cache[lo - cache_lo:hi - cache_lo]
        if hi <= cache_lo:
            return self._read(lo, hi)
        return self._read(lo, cache_lo) + self._cache[:hi - cache_lo]

    def _read(self, lo: int, hi: int) -> list[Entry]:
        """Entries [lo, hi) from the segment files, each checked against its stored crc."""
        out: list[Entry] = []
        base = self._base
        while lo < hi:
            p = bisect_right(self._firsts, lo) - 1
            seg = self._segs[p]
            end = hi if p + 1 == len(self._segs) else min(hi, self._firsts[p + 1])
            start = self._offs[lo - base]
            stop = self._offs[end - 1 - base] + wal.HEADER_SIZE + self._lens[end - 1 - base]
            buf = memoryview(os.pread(seg.fd, stop - start, start))
            for i in range(lo, end):
                prev = seg.prev_crc if i == seg.first else self._crcs[i - 1 - base]
                e = wal.decode_record(buf, self._offs[i - base] - start, prev)
                if e is None or e.index != i or e.term != self._terms[i - base]:
                    self._report(seg.path, self._offs[i - base], "checksum_mismatch", i,
                                 "record failed its checksum when read")
                    raise CorruptRangeError(i, i + 1, f"{seg.path} offset {self._offs[i - base]}")
                out.append(e)
            lo = end
        return out

    # ------------------------------------------------------------------ write side

    def commit_watermark(self) -> int:
        """The highest commit index this log once recorded but lost to corruption (0 when
        none). Until ``last_index()`` reaches it again the node must refuse votes to
        candidates whose log ends before it: those entries were committed, and a leader
        without them would overwrite them (Raft §5.4 leader completeness; the hazard of
        nats-server #7549). Cleared durably once the log is repaired past it."""
        return self._watermark

    def _drop_watermark_if_repaired(self) -> None:
        """Once the log holds the watermark again, make that durable first (one sync, once
        per repair), then forget the watermark."""
        if self._watermark and self.last_index() >= self._watermark:
            self._sync.sync_owner(self)
            self._watermark = 0
            path = os.path.join(self.directory, WATERMARK_FILE)
            try:
                fileio.unlink(path)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise storage_error("unlink", path, exc) from exc
            self._sync.fsync_dir_now(self.directory)

    def append(self, entries: list[Entry]) -> None:
        """Append ``entries`` (consecutive indexes). An entry whose index is already present
        truncates the log from there (Raft §5.3), as does appending over a corrupt range
        (the repair: the corrupt bytes are cut off first). Entries below first_index() are
        skipped (etcd MemoryStorage.Append). One write() per segment touched.

        Raises ValueError if the indexes are not consecutive or leave a gap after
        last_index(); StorageError if a write fails (the failed write is cut off again;
        entries written before it in the same call, a prefix, stay; the log is failed: see
        :attr:`failed` and :meth:`rollback_to_durable`)."""
        self._check_open()
        if not entries:
            return
        first = entries[0].index
        if entries[-1].index - first != len(entries) - 1 or any(
                e.index != first + k for k, e in enumerate(entries)):
            raise ValueError("append: entry indexes are not consecutive")
        c = self._compacted
        if first <= c:
            entries = entries[c + 1 - first:]
            if not entries:
                return
            first = c + 1
        last = self.last_index()
        if first > last + 1:
            raise ValueError(f"append: entry {first} would leave a gap after {last}")
        if first <= last or self._bad is not None:
            self._cut(first)
        self._write(entries)
        if self._watermark:
            self._drop_watermark_if_repaired()

    def _write(self, entries: list[Entry]) -> None:
        n = len(entries)
        pos = 0
        limit = self._segment_bytes
        while pos < n:
            seg = self._segs[-1] if self._segs else None
            out = bytearray()
            if seg is None or (seg.size >= limit and seg.size > wal.SEGMENT_HEADER_SIZE):
                seg = self._create_segment(entries[pos].index)
                out += wal.encode_segment_header(seg.first, seg.prev_crc)
            room = limit - seg.size - len(out)
            end = pos + 1
            room -= wal.HEADER_SIZE + len(entries[pos].data)
            while end < n:
                room -= wal.HEADER_SIZE + len(entries[end].data)
                if room < 0:
                    break
                end += 1
            chunk = entries[pos:end] if pos or end < n else entries
            offs: list[int] = []
            crcs: list[int] = []
            lens: list[int] = []
            crc = wal.encode_records(chunk, self._tail_crc, out, seg.size, offs, crcs, lens)
            try:
                fileio.pwrite_all(seg.fd, out, seg.size, seg.path)
            except OSError as exc:
                try:                    # the failed write changes nothing, if it can be undone
                    fileio.ftruncate(seg.fd, seg.size, seg.path)
                except OSError:
                    seg.unsure = True
                raise self.fail(storage_error("write", seg.path, exc)) from exc
            seg.size += len(out)
            self._sync.mark_dirty(seg.sf)
            self._tail_crc = crc
            self._terms.extend([e.term for e in chunk])
            self._offs.extend(offs)
            self._crcs.extend(crcs)
            self._lens.extend(lens)
            for e in chunk:
                if e.type == EntryType.CONFIG_CHANGE:
                    try:
                        self._confs.append((e.index, ConfigChange.decode(e.data)))
                    except ValueError:
                        pass
            self._cache_add(chunk, sum(lens))
            pos = end

    def _create_segment(self, first: int) -> _Segment:
        path = os.path.join(self.directory, wal.segment_name(first))
        try:
            fd = fileio.open_file(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, fileio.FILE_MODE)
        except OSError as exc:
            raise self.fail(storage_error("create", path, exc)) from exc
        seg = _Segment(first, path, fd, 0, self._tail_crc, self)
        self._segs.append(seg)
        self._firsts.append(first)
        if not self._terms:
            self._base = first
        self._sync.mark_dir_dirty(self.directory, self)
        return seg

    def _cache_add(self, chunk: list[Entry], nbytes: int) -> None:
        self._cache.extend(chunk)
        self._cache_bytes += nbytes + _CACHE_OVERHEAD * len(chunk)
        if self._cache_bytes > self._cache_limit * 5 // 4:
            cache = self._cache
            k = 0
            while self._cache_bytes > self._cache_limit and k < len(cache):
                self._cache_bytes -= len(cache[k].data) + _CACHE_OVERHEAD
                k += 1
            del cache[:k]
            self._cache_lo += k

    def _cut(self, index: int) -> None:
        """Remove every entry from ``index`` on, on disk and in memory, and any corrupt
        range. Later segments are deleted newest first, then the segment holding ``index``
        is truncated: at every step the files hold a prefix of the old log."""
        bad = self._bad
        last = self.last_index()
        if index <= last:
            p = bisect_right(self._firsts, index) - 1
            offset = self._offs[index - self._base]
        elif bad is not None and bad.cut == index:
            p, offset = bad.seg, bad.offset
        else:                       # nothing before the corrupt bytes is worth keeping
            self._discard_all(index - 1)
            return
        while len(self._segs) > p + 1:
            self._drop_last_segment()
        seg = self._segs[p]
        if offset == 0 or (offset <= wal.SEGMENT_HEADER_SIZE and seg.first == index):
            self._drop_last_segment()
        else:
            self._truncate(seg, offset)
            self._sync.mark_dirty(seg.sf)
        self._bad = None
        self._truncate_arrays(index)
        self._tail_crc = self._crcs[-1] if self._crcs else (
            self._segs[-1].prev_crc if self._segs else self._tail_crc)

    def _truncate_arrays(self, index: int) -> None:
        k = index - self._base
        del self._terms[k:], self._offs[k:], self._crcs[k:], self._lens[k:]
        while self._confs and self._confs[-1][0] >= index:
            self._confs.pop()
        if index <= self._cache_lo:
            self._cache.clear()
            self._cache_bytes = 0
            self._cache_lo = index
        else:
            dropped = self._cache[index - self._cache_lo:]
            self._cache_bytes -= sum(len(e.data) + _CACHE_OVERHEAD for e in dropped)
            del self._cache[index - self._cache_lo:]

    def _drop_last_segment(self) -> None:
        seg = self._segs.pop()
        self._firsts.pop()
        self._close_segment(seg)
        self._unlink(seg.path)

    def _close_segment(self, seg: _Segment) -> None:
        self._sync.forget(seg.sf)
        os.close(seg.fd)

    def _truncate(self, seg: _Segment, size: int) -> None:
        """Cut segment ``seg`` to ``size`` bytes (StorageError if that fails)."""
        try:
            fileio.ftruncate(seg.fd, size, seg.path)
        except OSError as exc:
            seg.unsure = True
            raise self.fail(storage_error("truncate", seg.path, exc)) from exc
        seg.size = size
        seg.sf.truncated(size)

    def _unlink(self, path: str) -> None:
        try:
            fileio.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self.fail(storage_error("unlink", path, exc)) from exc
        self._sync.mark_dir_dirty(self.directory, self)

    def fail(self, exc: StorageError) -> StorageError:
        """Fail the log with ``exc`` (a failed write does it itself; a driver whose shared
        sync pass reported one of this log's files calls it): every later write raises the
        first failure, and :meth:`close` no longer syncs. Returns ``exc``."""
        if self.failed is None:
            self.failed = exc
        return exc

    def _discard_all(self, last: int | None = None) -> None:
        """Delete every segment (newest first) and fsync the directory now, so that no
        old segment can reappear beside the ones written next. The log becomes empty after
        ``last`` (default: the snapshot index)."""
        last = self._snap.index if last is None else last
        while self._segs:
            self._drop_last_segment()
        self._sync.fsync_dir_now(self.directory)
        self._bad = None
        self._base = last + 1
        self._truncate_arrays(last + 1)
        self._cache.clear()
        self._cache_bytes = 0
        self._cache_lo = last + 1
        self._confs.clear()
        self._tail_crc = 0

    def set_hard_state(self, hs: HardState) -> None:
        """Store ``hs`` (Raft Figure 2 persistent state). Durable at the next sync() when
        term or vote changed (or ``sync_commit``); a commit-only change is written lazily.
        Raises ValueError if the vote does not fit a 4 KiB slot."""
        self._check_open()
        if hs == self._hs:
            return
        must = hs.term != self._hs.term or hs.vote != self._hs.vote or self._sync_commit
        self._write_hard_state(hs, must)

    def _write_hard_state(self, hs: HardState, must: bool) -> None:
        slot = 1 - self._hs_durable_slot
        image = meta.encode_hard_state_slot(self._hs_seq + 1, hs)
        if self._hs_sf is None:     # both slots valid from the start: slot 1 = empty state
            self._open_hard_state_file()
            self._sync.mark_dir_dirty(self.directory, self)
            image = (image.ljust(meta.SLOT_SIZE, b"\0")
                     + meta.encode_hard_state_slot(0, HardState()))
        try:
            fileio.pwrite_all(self._hs_sf.fd, image, slot * meta.SLOT_SIZE, self._hs_sf.path)
        except OSError as exc:
            raise self.fail(storage_error("write", self._hs_sf.path, exc)) from exc
        self._hs_seq += 1
        self._hs_written_slot = slot
        self._hs = hs
        if must:
            self._sync.mark_dirty(self._hs_sf)
            self._hs_lazy = False
        else:
            self._hs_lazy = True

    def _hard_state_synced(self) -> None:
        self._hs_durable_slot = self._hs_written_slot
        self._hs_lazy = False

    def create_snapshot(self, index: int, data: bytes, peers: tuple[str, ...],
                        learners: tuple[str, ...] = ()) -> Snapshot:
        """Record that the application's state ``data`` covers the log up to ``index``
        (applied, so within the log); ``term`` comes from the log. Durable on return. Does
        not delete segments: call compact(). Raises ValueError if index <= snapshot.index,
        UnavailableError/CorruptRangeError if index > last_index()."""
        self._check_open()
        if index <= self._snap.index:
            raise ValueError(f"snapshot index {index} not after current {self._snap.index}")
        snap = Snapshot(index, self.term(index), tuple(peers), bytes(data), tuple(learners))
        self._install(snap)
        return snap

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Install a snapshot received from the leader (Raft §7). If the log holds
        ``snap.index`` with ``snap.term`` the entries after it are kept and whole segments
        up to it deleted; otherwise the whole log is discarded. Durable on return. A
        snapshot not newer than the current one is ignored."""
        self._check_open()
        if snap.index <= self._snap.index:
            return
        try:
            keep = self.term(snap.index) == snap.term
        except (UnavailableError, CorruptRangeError):
            keep = False
        self._install(snap)
        if keep:
            self.compact(snap.index)
        else:
            self._compacted, self._compacted_term = snap.index, snap.term
            self._discard_all()

    def _install(self, snap: Snapshot) -> None:
        meta.write_atomic(self.directory, meta.SNAPSHOT_FILE, meta.encode_snapshot(snap),
                          self._sync)
        self._snap = snap
        self._confs = [c for c in self._confs if c[0] > snap.index]

    def compact(self, index: int) -> None:
        """Make entries <= ``index`` unreadable (first_index() becomes index + 1) and delete
        the whole segment files whose entries are all <= ``index``. Live segments are never
        rewritten; a segment holding a corrupt range is kept until repaired. Compacting to
        an already compacted index does nothing. Raises ValueError if index >
        snapshot.index."""
        self._check_open()
        if index > self._snap.index:
            raise ValueError(f"compact({index}) beyond snapshot index {self._snap.index}")
        if index > self._compacted:
            self._compacted_term = self.term(index)
            self._compacted = index
        index = self._compacted
        drop = 0
        limit = len(self._segs) if self._bad is None else self._bad.seg
        while drop < limit:
            seg_last = (self._firsts[drop + 1] - 1 if drop + 1 < len(self._segs)
                        else self.last_index())
            if seg_last > index:
                break
            drop += 1
        if not drop:
            return
        for seg in self._segs[:drop]:
            self._close_segment(seg)
            self._unlink(seg.path)
        del self._segs[:drop], self._firsts[:drop]
        new_base = self._firsts[0] if self._segs else self.last_index() + 1
        k = max(0, new_base - self._base)
        del self._terms[:k], self._offs[:k], self._crcs[:k], self._lens[:k]
        self._base += k
        if self._bad is not None:
            self._bad.seg -= drop

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (the log then refuses every call)."""
        return self._closed

    def close(self) -> None:
        """Make everything durable (a GroupCommit.sync()) and close the files. The files
        are closed even when that sync fails; then its StorageError is raised."""
        if self._closed:
            return
        if self._hs_lazy and self._hs_sf is not None and self.failed is None:
            self._sync.mark_dirty(self._hs_sf)
        try:
            if self.failed is None:
                self._sync.sync_owner(self)
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Close the files without making anything durable (what a crash looks like to
        them); the GroupCommit forgets them. Used after a storage failure."""
        if self._closed:
            return
        self._closed = True
        self._sync.forget_owner(self)
        for seg in self._segs:
            self._close_segment(seg)
        if self._hs_sf is not None:
            self._sync.forget(self._hs_sf)
            os.close(self._hs_sf.fd)

    def rollback_to_durable(self) -> None:
        """After a failed write or fsync, put the files back to what is provably on disk,
        then :meth:`abandon` the log; reopen it (a new GroupLog on the same directory) to
        go on (it must be failed: no write may be in flight). Every entry and hard state
        acknowledged was made durable by a successful
        fsync, so nothing acknowledged is lost:

        - a segment whose fsync failed is cut to :attr:`SyncFile.durable` (its length at its
          last successful fsync), and the segments after it are deleted; a segment whose
          failed write could not be undone is cut to the length written before it;
        - a hard state slot written since the last successful fsync of a poisoned hard
          state file is zeroed, so the slot last fsynced is the one read back;
        - then every file and the directory are fsynced (never through the GroupCommit,
          which refuses poisoned files), and their pages dropped from the page cache
          (``posix_fadvise(DONTNEED)``), so that reopening reads the device, not what the
          kernel kept of a failed write-back.

        Raises StorageError when a step fails: the log stays failed and open, and the
        rollback may be tried again (each step can be done twice)."""
        d = self.directory
        try:
            cut_from = None
            for k, seg in enumerate(self._segs):
                if seg.sf.failed is not None:
                    keep = seg.sf.durable
                elif seg.unsure:
                    keep = seg.size
                else:
                    continue
                if keep <= wal.SEGMENT_HEADER_SIZE and seg.sf.failed is not None:
                    cut_from = k            # nothing of it was durable: drop it
                    break
                fileio.ftruncate(seg.fd, keep, seg.path)
                seg.size = keep
                seg.sf.truncated(keep)
                seg.unsure = False
                if seg.sf.failed is not None:
                    cut_from = k + 1
                    break
            if cut_from is not None:
                for seg in reversed(self._segs[cut_from:]):
                    try:
                        fileio.unlink(seg.path)
                    except FileNotFoundError:
                        pass
            hs = self._hs_sf
            if hs is not None and hs.failed is not None \
                    and self._hs_written_slot != self._hs_durable_slot:
                fileio.pwrite_all(hs.fd, bytes(meta.SLOT_SIZE),
                                  self._hs_written_slot * meta.SLOT_SIZE, hs.path)
            files = [(seg.fd, seg.path) for seg in self._segs[:cut_from]]
            if hs is not None:
                files.append((hs.fd, hs.path))
            for fd, path in files:
                fileio.fdatasync(fd, path)
            fileio.sync_directory(d)
            for fd, _path in files:
                _drop_cache(fd)
        except OSError as exc:
            raise storage_error("rollback", getattr(exc, "filename", None) or d, exc) from exc
        self.abandon()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"group log {self.directory} is closed")
        if self.failed is not None:
            raise self.failed


def _drop_cache(fd: int) -> None:
    """Ask the kernel to drop a file's clean pages, so the next read comes from the device
    (best effort: not every platform or filesystem has it)."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass
