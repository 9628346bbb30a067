"""Opening a stream's file store: its block files, the recovery scan of their records, and
the block index files that spare the scan (a mixin of
:class:`~jetraft.jetstream.store.FileStore`, whose module docstring says what recovery does
with torn tails and checksum mismatches).

:class:`_Block` is one open block file. Opening lists the blocks in name order, checks each
header, and indexes each block from its index file when that still describes it, else by
walking its records (:func:`~jetraft.jetstream.store_format.scan_block` past the first damage
found); every change to the disk goes through :mod:`jetraft.storage.fileio`. As nats-server
``server/filestore.go`` recovers its message blocks (``recoverMsgs``, ``recoverMsgBlock``,
``rebuildState``); the block and index file formats are jetraft's own
(:mod:`jetraft.jetstream.store_format`).

A compressed block (:mod:`jetraft.jetstream.store_compress`) is opened from the plain
block it holds: from its index file without decompressing when every chunk checks out and
the index names its plain length and crc32, else decompressed and walked, a damaged
chunk's bytes read as damaged records (reported, never served). The last block is the one
records are appended to: found compressed (the next block's creation was torn), it is
written back plain first.
"""

from __future__ import annotations

import os
import zlib

from jetraft.storage import fileio
from jetraft.storage.group_commit import StorageError, SyncFile

from . import store_compress as pack
from . import store_format as fmt
from .admission import MAX_SEQ, MAX_TS, subject_problem
from .store_index import Segment


class _Block:
    """One open block file: ``live`` messages of the index it holds, ``external`` records
    it holds that affect earlier blocks (tombstones of lower sequences, purge markers);
    ``unsure``: a failed write could not be undone (bytes past ``size`` may remain);
    ``crc``: crc32 of its ``size`` bytes (None: not known); ``pure``: it holds message
    records only, in sequence (it may have an index file); ``indexed``: the size its index
    file was written for (-1: none); ``pack``: None for a plain block file, the chunk table
    of a compressed one (``size`` and ``crc`` are then the plain block's)."""

    __slots__ = ("start", "path", "sf", "size", "live", "external", "unsure", "crc", "pure",
                 "indexed", "pack")

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
        self.pack: pack.Packed | None = None


class _Recovery:
    """Opening a :class:`~jetraft.jetstream.store.FileStore` from its block files, and
    writing the block index files the next open reads."""

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
            start = fmt.parse_block_name(name)
            packed, bad = None, []
            if pack.is_packed(buf):
                try:
                    packed = pack.read_packed(buf)
                except ValueError as exc:
                    raise StorageError(f"{path}: {exc}") from exc
                if packed is None:
                    self._last = max(self._last, start - 1)
                    self._report(name, 0, "checksum_mismatch", start,
                                 "damaged compressed block header; block set aside as .corrupt")
                    fileio.replace(path, path + ".corrupt")
                    self._gc.fsync_dir_now(self.directory)
                    continue
                if is_last:
                    buf, bad = self._unpack_last(path, buf, packed)
                    packed = None
            if packed is None:
                try:
                    head = fmt.check_block_header(buf)
                except ValueError as exc:
                    raise StorageError(f"{path}: {exc}") from exc
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
            if packed is None:
                blk = _Block(start, path, fd, len(buf), self, zlib.crc32(buf))
            else:
                blk = _Block(start, path, fd, packed.plain_len, self, packed.plain_crc)
                blk.pack = packed
            self._blocks.append(blk)
            self._last = max(self._last, start - 1)
            if packed is not None and not pack.damaged_chunks(buf, packed) \
                    and self._replay_index(blk, indexes.pop(start, None), packed.plain_len):
                continue
            if packed is not None:
                buf, bad = pack.unpack(buf, packed)
                if not bad and zlib.crc32(buf) != packed.plain_crc:
                    self._report(name, 0, "checksum_mismatch", start,
                                 "compressed block: plain crc32 mismatch; records checked one by one")
                    blk.crc = zlib.crc32(buf)
            elif self._replay_index(blk, indexes.pop(start, None), len(buf)):
                continue
            self._blocks_walked += 1
            off = self._replay_fast(blk, name, buf)
            if off == len(buf) and not bad:
                continue
            blk.pure = False
            scan = fmt.scan_block(buf, is_last and packed is None, off)
            if scan.end < len(buf) and packed is None:
                fileio.ftruncate(fd, scan.end, path)
                self._gc.fsync_now(fd, path)
                blk.size = scan.end
                blk.sf.truncated(scan.end)
                blk.crc = zlib.crc32(memoryview(buf)[:scan.end])
            scan.damage += [fmt.Damage("checksum_mismatch", a, 0, f"compressed block: {detail}")
                            for _i, a, _b, detail in bad]
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
        for n in listing:                   # an index write or a compression cut short
            if n.endswith((".idx.tmp", ".blk.tmp", ".corrupt.tmp")):
                self._remove_index_file(n)
        self._fix_first()
        self._ready = True
        self.set_compression(self.compression)      # sealed plain blocks: to be compressed
        for blk in list(self._blocks):
            self._maybe_free(blk)

    @property
    def blocks_walked(self) -> int:
        """How many blocks opening this store walked record by record (every record's
        checksums checked); the other blocks it opened were read from their index files."""
        return self._blocks_walked

    def _replay_index(self, blk: _Block, idx_name: str | None, size: int) -> bool:
        """Index block ``blk`` (``size`` bytes, plain) from its index file when there is one
        that still describes it (same length and crc32, in sequence after what came before);
        True when done.
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
        if ix is None or not n or ix.block_size != size or ix.block_crc != blk.crc \
                or ix.base != blk.start or self._last != ix.base - 1 \
                or fmt.BLOCK_HEADER_SIZE + sum(ix.rsz) != size \
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
        blk.indexed = size
        return True

    def _unpack_last(self, path: str, buf: bytes, packed: pack.Packed
                     ) -> tuple[bytes, list[tuple[int, int, int, str]]]:
        """Write the last block, found compressed, back as the plain block it holds (records
        are appended to it); returns its plain bytes and damaged chunks (their bytes zero:
        damaged records to the scan). A damaged one is first copied to ``.corrupt``."""
        plain, bad = pack.unpack(buf, packed)
        if bad:
            pack.write_aside(path + ".corrupt", buf)
        pack.write_aside(path, plain)
        return plain, bad

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

