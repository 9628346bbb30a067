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

Compression (FileStore, stream ``compression: s2``): a block is compressed when the store
starts the next one (nats-server 2.10 compresses a block once it is no longer the last);
the last block never is. Written aside, fdatasynced and renamed over the plain block, so a
crash leaves one whole file or the other; the plain bytes it holds, records and checksums,
are unchanged, so offsets, sizes, index files, snapshots and catch-up are the same either
way, and so are the message sizes the stream counts (``StreamState.bytes``: nats-server
counts the messages, not the file). Reading a message decompresses the one or two 64 KiB
chunks it lies in (a few are cached). Blocks sealed before compression was set (an update,
a restart, a catch-up) are compressed one per block started. A failed compression leaves
the block plain and is kept in :attr:`FileStore.pack_error`. Format and rules in
:mod:`jetraft.jetstream.store_compress`.

The parts are modules beside this one: :mod:`jetraft.jetstream.store_base` (the types, the
shared index-backed store and :class:`MemoryStore`, imported here),
:mod:`jetraft.jetstream.store_recovery` (opening a FileStore: recovery, block index files),
:mod:`jetraft.jetstream.store_format` (the block files) and
:mod:`jetraft.jetstream.store_index` (the index).
"""

from __future__ import annotations

import errno
import os
import zlib
from collections import OrderedDict

from jetraft.storage import fileio
from jetraft.storage.group_commit import GroupCommit, StorageError, SyncFailed, SyncFile, storage_error

from . import store_compress as pack
from . import store_format as fmt
from .store_base import (
    MAX_DELETED_DETAILS,
    MAX_SUBJECT_DETAILS,
    CorruptMessage,
    MemoryStore,
    TooManyResults,
    MessageNotFound,
    StoredMessage,
    StreamState,
    _IndexedStore,
    msg_size,
)
from .store_recovery import _Block, _Recovery

__all__ = ["MAX_DELETED_DETAILS", "MAX_SUBJECT_DETAILS", "CorruptMessage", "FileStore",
           "MemoryStore", "MessageNotFound", "StoredMessage", "StreamState", "StorageError",
           "TooManyResults", "msg_size"]

DEFAULT_BLOCK_BYTES = 8 << 20
#: Decompressed chunks of compressed blocks a FileStore keeps for the next reads.
CHUNK_CACHE = 8


class FileStore(_Recovery, _IndexedStore):
    """``FileStore(directory, *, sync, block_bytes=8 MiB, sync_always=True, compression="none")``.

    ``sync``: the server's shared GroupCommit. ``block_bytes``: a new block is started when
    a message would take the last one past this size (bytes). ``sync_always`` False makes
    :meth:`sync` a no-op unless called with ``force=True`` (nats-server's lazy
    ``sync_interval``: the server's interval timer forces it); True (default) makes every
    ``sync()`` durable. ``compression``: the stream's, "none" or "s2" (blocks are
    compressed once sealed: see :meth:`set_compression`).

    Opening rebuilds the index from the blocks (see the module docstring for torn tails
    and checksum mismatches); ``recovery_report`` lists what was found, one dict per
    problem: ``{"file", "offset", "kind": "torn_tail" | "checksum_mismatch", "first_seq"}``
    (``first_seq``: the sequence the damaged record names, or the first sequence it may
    have held when its header was unreadable). Blocks whose messages are all gone are
    deleted after the next sync (the first block, or any block whose records affect no
    other block). Raises StorageError for a block of an unknown format version.
    """

    def __init__(self, directory: str | os.PathLike, *, sync: GroupCommit,
                 block_bytes: int = DEFAULT_BLOCK_BYTES, sync_always: bool = True,
                 compression: str = "none") -> None:
        super().__init__()
        self.directory = os.fspath(directory)
        self.compression = _checked_compression(compression)
        self._to_pack: list[_Block] = []
        self._chunk_cache: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        #: The StorageError of the last block compression that failed (the block stayed
        #: plain and is tried again when the next block is started), or None.
        self.pack_error: StorageError | None = None
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
                if self.compression in pack.ALGORITHMS:
                    self._pack(prev)
                    while self._to_pack and self._pack(self._to_pack.pop(0)) is None:
                        pass        # at most one queued block compressed (or tried) per block
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

    # --- compression -------------------------------------------------------------------
    def set_compression(self, compression: str) -> None:
        """Compress blocks from now on ("s2": every sealed block not compressed yet is
        queued, and compressed one per block started) or not ("none": compressed blocks
        stay so and are read as before). As nats-server, the setting is the stream's and
        may change on update."""
        self.compression = _checked_compression(compression)
        if self.compression in pack.ALGORITHMS:
            queued = set(map(id, self._to_pack))
            self._to_pack += [b for b in self._blocks[:-1] if b.pack is None and id(b) not in queued]
        else:
            self._to_pack = []

    def _pack(self, blk: _Block) -> bool | None:
        """Compress sealed block ``blk`` (see the module docstring); True when it was
        compressed now, None when it needs it no longer (compressed, deleted, the last
        block) or the store is failed. False when it failed: the block stays plain
        (:attr:`pack_error`) and is queued again; so is a block whose bytes no longer match
        their crc32 (they are never compressed over: the record checksums report them)."""
        if blk.pack is not None or blk not in self._blocks or blk is self._blocks[-1] \
                or self.failed is not None or blk.unsure or blk.sf.failed is not None \
                or blk.size > pack.MAX_PLAIN:
            return None
        tmp = blk.path + ".tmp"
        fd = None
        try:
            plain = os.pread(blk.sf.fd, blk.size, 0)
            if len(plain) != blk.size or zlib.crc32(plain) != blk.crc:
                raise OSError(errno.EIO, "block bytes do not match their crc32", blk.path)
            data = pack.pack_block(plain, pack.ALGORITHMS[self.compression])
            packed = pack.read_packed(data)
            fd = fileio.open_file(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, fileio.FILE_MODE)
            fileio.pwrite_all(fd, data, 0, tmp)
            fileio.fdatasync(fd, tmp)
            fileio.replace(tmp, blk.path)
        except (OSError, ValueError) as exc:
            if fd is not None:
                os.close(fd)
                try:
                    fileio.unlink(tmp)
                except OSError:
                    pass
            err = exc if isinstance(exc, OSError) else OSError(errno.EIO, str(exc))
            self.pack_error = storage_error("compress", blk.path, err)
            if blk not in self._to_pack:
                self._to_pack.append(blk)
            return False
        # the compressed file is durable under its own name; the rename is made durable by
        # the next sync (the directory's fsync): until then either file is whole
        self._gc.forget(blk.sf)
        os.close(blk.sf.fd)
        blk.sf = SyncFile(fd, blk.path, owner=self, size=len(data))
        blk.pack = packed
        self._gc.mark_dir_dirty(self.directory, self)
        return True

    def _chunk(self, blk: _Block, i: int) -> bytes:
        """Chunk ``i`` of compressed block ``blk``, decompressed (cached). Raises
        :class:`~jetraft.jetstream.store_compress.ChunkDamaged` or OSError."""
        key = (blk.start, i)
        got = self._chunk_cache.get(key)
        if got is not None:
            self._chunk_cache.move_to_end(key)
            return got
        pb = blk.pack
        got = pack.decode_chunk(pb, i, os.pread(blk.sf.fd, pack.stored_len(pb, i), pb.offs[i]))
        self._chunk_cache[key] = got
        if len(self._chunk_cache) > CHUNK_CACHE:
            self._chunk_cache.popitem(last=False)
        return got

    def _read_plain(self, blk: _Block, off: int, n: int) -> bytes:
        """Up to ``n`` plain bytes of block ``blk`` from ``off`` (fewer at its end): from
        the file, or from the chunks of a compressed block that hold them (at most ``n``
        bytes and a chunk decompressed). Raises ChunkDamaged or OSError."""
        n = min(n, blk.size - off)
        if n <= 0:
            return b""
        pb = blk.pack
        if pb is None:
            return os.pread(blk.sf.fd, n, off)
        first, last = off // pb.chunk, (off + n - 1) // pb.chunk
        a = off - first * pb.chunk
        if first == last:
            return self._chunk(blk, first)[a:a + n]
        return b"".join(self._chunk(blk, i) for i in range(first, last + 1))[a:a + n]

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
        or not started yet). A compressed block serves the plain bytes it holds. Raises
        OSError on a read error (EIO for a damaged chunk of a compressed block)."""
        self._check_open()
        for blk in self._blocks + self._doomed:
            if blk.start == first_seq:
                if offset >= blk.size or offset < 0 or n <= 0:
                    return b""
                try:
                    return self._read_plain(blk, offset, n)
                except pack.ChunkDamaged as exc:      # never serve what fails its checksum
                    raise OSError(errno.EIO, f"compressed block {exc}", blk.path) from None
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
        if blk.pack is None:
            buf = os.pread(blk.sf.fd, size, off)
        else:
            try:
                buf = self._read_plain(blk, off, size)
            except pack.ChunkDamaged as exc:
                raise CorruptMessage(f"message {seq} fails its checksum ({blk.path}@{off}: "
                                     f"compressed {exc})") from None
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
        self._blocks, self._doomed, self._to_pack = [], [], []
        self._chunk_cache.clear()

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
                          sync_always=self.sync_always, compression=self.compression)
        fresh.recovered_last = fresh._last
        if fresh._last < self._last:
            try:
                fresh.skip_to(self._last)
                fresh.sync(force=True)
            except StorageError:
                fresh.close()
                raise
        return fresh


def _checked_compression(compression: str) -> str:
    """``compression`` as a store takes it: "none" (also "") or an algorithm of
    :data:`~jetraft.jetstream.store_compress.ALGORITHMS`; ValueError otherwise."""
    if compression in ("", "none"):
        return "none"
    if compression not in pack.ALGORITHMS:
        raise ValueError(f"unknown compression algorithm {compression!r}")
    return compression
