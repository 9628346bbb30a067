"""The in-memory index of a stream's message store (:mod:`jetraft.jetstream.store`).

For every stored message: its subject, size (bytes, as it counts for the stream), timestamp
(ns since the epoch) and where to read it back; for every subject, its stored sequences in
ascending order. Sequences are handed out ascending, so the index is a list of
:class:`Segment` s, each covering a run of consecutive sequences in flat ``array`` columns
(one slot per sequence), found by binary search on their first sequence. A FileStore starts
a segment per block file.

A segment's columns never change once a slot is appended: a removed message only clears
its byte in ``present``. So a segment always still says what its block's own records were,
which is what a block index file (:class:`~jetraft.jetstream.store_format.BlockIndex`)
holds. Subjects are numbered per segment (``names``), so a number never comes to mean
another subject.

Why columns and not a dict of tuples: a message costs about 40 bytes here (plus 8 in its
subject's list) instead of about 250, and there is no Python object per message, so the
garbage collector has nothing to walk. With one tuple per message, opening a
1,000,000-message store spent 0.9 s of its 2.2 s in collections, and every full collection
of the running server walked every message (0.18 s per million). nats-server keeps a
per-block index too (``filestore.go msgBlock``).

Slots of a sequence that was never stored (a skipped or lost sequence) are padded in place
when the gap is short; a longer gap starts a new segment, so a hostile ``purge`` to a huge
sequence costs nothing. Nothing walks such a gap either: the missing sequences come as
runs (:meth:`SeqIndex.missing_runs`: a gap between segments is one run, runs of empty slots
inside a segment are found by ``bytearray.find``), and stored sequences are found segment
by segment (:meth:`SeqIndex.seqs`, :meth:`SeqIndex.seqs_descending`,
:meth:`SeqIndex.first_from`). A segment whose messages are all gone is dropped (the last
one is kept for appending). Per-subject sequence lists are ``array('q')``; removing the
first one is a memmove, as it was with lists.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator
from itertools import accumulate

__all__ = ["Segment", "SeqIndex"]

#: A gap of at most this many sequences is padded in the current segment.
MAX_PAD = 64
#: Slots per segment when there is no owner to cut at (MemoryStore).
SEGMENT_SLOTS = 1 << 16


class Segment:
    """Consecutive sequences ``base .. base + len(subj) - 1`` and their columns.

    ``present[i]``: 1 while slot ``i`` holds a message; ``subj``: the slot's subject, an
    index into ``names`` (``ids`` maps back while the segment is appended to, None after);
    ``size``: bytes the message counts for; ``ts``: ns since the epoch; ``off``/``rsz``:
    FileStore record offset and bytes in the ``owner`` block; ``objs``: MemoryStore's
    message objects (None for a FileStore); ``live``: slots holding a message;
    ``padded``: some slots never held one."""

    __slots__ = ("base", "names", "ids", "subj", "size", "ts", "off", "rsz", "present",
                 "objs", "owner", "live", "padded")

    def __init__(self, base: int, owner, with_objs: bool) -> None:
        self.base = base
        self.names: list[str] = []
        self.ids: dict[str, int] | None = {}
        self.subj = array("i")
        self.size = array("q")
        self.ts = array("q")
        self.off = array("q")
        self.rsz = array("q")
        self.present = bytearray()
        self.objs: list | None = [] if with_objs else None
        self.owner = owner
        self.live = 0
        self.padded = False

    @property
    def end(self) -> int:
        """The sequence after the last slot."""
        return self.base + len(self.subj)

    def local_id(self, subject: str) -> int:
        """The number of ``subject`` in this segment, added if new."""
        sid = self.ids.get(subject)
        if sid is None:
            sid = self.ids[subject] = len(self.names)
            self.names.append(subject)
        return sid

    def pad(self, n: int) -> None:
        """Add ``n`` empty slots."""
        if n <= 0:
            return
        self.padded = True
        zeros = array("q", bytes(8 * n))
        self.subj.extend(array("i", bytes(4 * n)))
        self.size.extend(zeros)
        self.ts.extend(zeros)
        self.off.extend(zeros)
        self.rsz.extend(zeros)
        self.present.extend(bytes(n))
        if self.objs is not None:
            self.objs.extend([None] * n)


class SeqIndex:
    """``SeqIndex(with_objs)``: the index of one store (see the module docstring).

    ``by_subject[name]``: the subject's stored sequences (ascending ``array('q')``), only
    for subjects with a message stored. Raises ValueError when a sequence is added at or
    below one already indexed."""

    def __init__(self, with_objs: bool = False) -> None:
        self.with_objs = with_objs
        self.segs: list[Segment] = []
        self.bases: list[int] = []
        self.count = 0
        self.by_subject: dict[str, array] = {}

    def __len__(self) -> int:
        return self.count

    def seqs_of(self, subject: str) -> array:
        """The sequence list of ``subject``, created (empty) if it has none."""
        lst = self.by_subject.get(subject)
        if lst is None:
            lst = self.by_subject[subject] = array("q")
        return lst

    # --- adding --------------------------------------------------------------------------
    def segment_for(self, seq: int, owner) -> Segment:
        """The segment ``seq`` is to be appended to (padded up to it), started when there
        is none, the owner differs, the gap is long or the segment is full."""
        seg = self.segs[-1] if self.segs else None
        if seg is not None:
            end = seg.end
            if seq < end:
                raise ValueError(f"sequence {seq} is not after the last indexed ({end - 1})")
            if seg.owner is owner and seq - end <= MAX_PAD and not (
                    self.with_objs and len(seg.subj) >= SEGMENT_SLOTS):
                seg.pad(seq - end)
                return seg
        return self._append_segment(Segment(seq, owner, self.with_objs))

    def _append_segment(self, seg: Segment) -> Segment:
        last = self.segs[-1] if self.segs else None
        if last is not None:
            if seg.base < last.end:
                raise ValueError(f"sequence {seg.base} is not after the last indexed "
                                 f"({last.end - 1})")
            last.ids = None             # sealed: never appended to again
            if last.live == 0:
                self._remove_segment(len(self.segs) - 1)
        self.segs.append(seg)
        self.bases.append(seg.base)
        return seg

    def add(self, seq: int, subject: str, size: int, ts: int, owner=None, off: int = 0,
            rsz: int = 0, obj=None) -> None:
        """Index message ``seq`` (above every indexed sequence)."""
        seg = self.segment_for(seq, owner)
        seg.subj.append(seg.local_id(subject))
        seg.size.append(size)
        seg.ts.append(ts)
        seg.off.append(off)
        seg.rsz.append(rsz)
        seg.present.append(1)
        if seg.objs is not None:
            seg.objs.append(obj)
        seg.live += 1
        self.count += 1
        self.seqs_of(subject).append(seq)

    def add_columns(self, base: int, owner, names: list[str], subj: array, size: array,
                    rsz: array, ts: array, first_off: int) -> Segment:
        """Index a whole segment of messages ``base, base + 1, ...``, every one present,
        from columns (a block index file's): subject numbers into ``names``, sizes, record
        bytes, timestamps; offsets run from ``first_off`` by the record bytes. Raises
        ValueError when ``base`` is not after every indexed sequence."""
        seg = Segment(base, owner, self.with_objs)
        n = len(subj)
        seg.names = names
        seg.ids = {name: i for i, name in enumerate(names)}
        seg.subj = subj
        seg.size = size if size.typecode == "q" else array("q", size)
        seg.rsz = rsz if rsz.typecode == "q" else array("q", rsz)
        seg.ts = ts
        seg.off = array("q", accumulate(seg.rsz[:-1], initial=first_off)) if n else array("q")
        seg.present = bytearray(b"\x01") * n
        seg.live = n
        self._append_segment(seg)
        self.count += n
        if len(names) == 1:
            self.seqs_of(names[0]).extend(range(base, base + n))
        elif names:
            lists = [self.seqs_of(name) for name in names]
            for seq, sid in zip(range(base, base + n), subj):
                lists[sid].append(seq)
        return seg

    # --- finding -------------------------------------------------------------------------
    def slot(self, seq: int) -> tuple[Segment | None, int]:
        """``(segment, slot)`` holding message ``seq``, or ``(None, 0)``."""
        k = bisect.bisect_right(self.bases, seq) - 1
        if k < 0:
            return None, 0
        seg = self.segs[k]
        i = seq - seg.base
        if i >= len(seg.present) or not seg.present[i]:
            return None, 0
        return seg, i

    def __contains__(self, seq: int) -> bool:
        return self.slot(seq)[0] is not None

    def subject_of(self, seq: int) -> str | None:
        """The subject of ``seq``, None when not stored."""
        seg, i = self.slot(seq)
        return None if seg is None else seg.names[seg.subj[i]]

    def ts_of(self, seq: int) -> int:
        """The timestamp of stored message ``seq`` (ns); KeyError when not stored."""
        seg, i = self.slot(seq)
        if seg is None:
            raise KeyError(seq)
        return seg.ts[i]

    def segment_of(self, owner) -> Segment | None:
        """The one segment of ``owner``, None when it has none or more than one."""
        found = [seg for seg in self.segs if seg.owner is owner]
        return found[0] if len(found) == 1 else None

    def first_from(self, seq: int) -> int | None:
        """The lowest stored sequence >= ``seq``, or None."""
        k = max(bisect.bisect_right(self.bases, seq) - 1, 0)
        for seg in self.segs[k:]:
            if not seg.live:
                continue
            i = seg.present.find(1, max(seq - seg.base, 0))
            if i >= 0:
                return seg.base + i
        return None

    def seqs(self, start: int, stop: int) -> Iterator[int]:
        """The stored sequences in ``start .. stop`` (inclusive), ascending. Do not change
        the index while iterating."""
        k = max(bisect.bisect_right(self.bases, start) - 1, 0)
        for seg in self.segs[k:]:
            base = seg.base
            if base > stop:
                return
            if not seg.live:
                continue
            present = seg.present
            hi = min(stop - base + 1, len(present))
            i = present.find(1, max(start - base, 0), hi)
            while i >= 0:
                yield base + i
                i = present.find(1, i + 1, hi)

    def seqs_descending(self, start: int, stop: int) -> Iterator[int]:
        """The stored sequences in ``start .. stop`` (inclusive), descending. Costs one step
        per segment and per sequence yielded, never one per sequence of a gap. Do not
        change the index while iterating."""
        if start > stop:
            return
        segs = self.segs
        for k in range(bisect.bisect_right(self.bases, stop) - 1, -1, -1):
            seg = segs[k]
            base = seg.base
            if seg.end <= start:
                return
            if not seg.live:
                continue
            present = seg.present
            lo = max(start - base, 0)
            i = present.rfind(1, lo, min(stop - base + 1, len(present)))
            while i >= 0:
                yield base + i
                i = present.rfind(1, lo, i)

    def _missing_pieces(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """:meth:`missing_runs` before adjacent runs are joined."""
        nxt = start             # the lowest sequence not accounted for yet
        segs = self.segs
        for k in range(max(bisect.bisect_right(self.bases, start) - 1, 0), len(segs)):
            seg = segs[k]
            base = seg.base
            if base > stop:
                break
            end = seg.end
            if end <= nxt:
                continue
            if base > nxt:      # between two segments: one run, whatever its length
                yield nxt, base - 1
                nxt = base
            hi = min(stop + 1, end) - base
            present = seg.present
            if seg.live < len(present):     # some slot is empty: find the empty runs
                i = nxt - base
                while i < hi:
                    j = present.find(0, i, hi)
                    if j < 0:
                        break
                    e = present.find(1, j, hi)
                    if e < 0:
                        e = hi
                    yield base + j, base + e - 1
                    i = e
            nxt = base + hi
        if nxt <= stop:
            yield nxt, stop

    def missing_runs(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """The sequences in ``start .. stop`` that are not stored, as ascending ``(first,
        last)`` runs (both inclusive, as long as possible: two runs never touch).

        A gap between two segments is one run however long it is (a purge or restore to a
        huge sequence, see the module docstring); inside a segment, runs of padded or
        removed slots are found with ``bytearray.find`` over its ``present`` bytes, and a
        segment with no empty slot is passed over without looking at them. So the cost is
        one step per segment and per run yielded, never one per missing sequence: stop
        iterating early to bound it. Do not change the index while iterating."""
        if start > stop:
            return
        first = last = None
        for a, b in self._missing_pieces(start, stop):
            if last is not None and a == last + 1:
                last = b
                continue
            if last is not None:
                yield first, last
            first, last = a, b
        if last is not None:
            yield first, last

    def missing(self, start: int, stop: int, limit: int | None = None) -> list[int]:
        """The sequences in ``start .. stop`` that are not stored, ascending: the lowest
        ``limit`` of them (all when ``limit`` is None: only for a range known to be short).
        Built from :meth:`missing_runs`, so it costs O(``limit`` + segments), never
        O(size of a gap)."""
        out: list[int] = []
        room = limit
        for a, b in self.missing_runs(start, stop):
            if room is not None:
                if room <= 0:
                    break
                b = min(b, a + room - 1)
                room -= b - a + 1
            out.extend(range(a, b + 1))
        return out

    # --- removing ------------------------------------------------------------------------
    def drop(self, seq: int) -> tuple[str, int, object]:
        """Remove message ``seq``; returns ``(subject, size, owner)``. KeyError when not
        stored."""
        seg, i = self.slot(seq)
        if seg is None:
            raise KeyError(seq)
        subject = seg.names[seg.subj[i]]
        size = seg.size[i]
        seg.present[i] = 0
        if seg.objs is not None:
            seg.objs[i] = None
        seg.live -= 1
        self.count -= 1
        lst = self.by_subject[subject]
        if lst[0] == seq:
            del lst[0]
        else:
            del lst[bisect.bisect_left(lst, seq)]
        if not lst:
            del self.by_subject[subject]
        owner = seg.owner
        if seg.live == 0 and seg is not self.segs[-1]:
            self._remove_segment(self.segs.index(seg))
        return subject, size, owner

    def _remove_segment(self, k: int) -> None:
        del self.segs[k]
        del self.bases[k]
