"""Compressed message blocks: the file store of a stream with ``compression: s2``.

As nats-server 2.10 does (server/filestore.go ``recompressOnDiskIfNeeded``,
``atomicOverwriteFile``), a block is compressed when it is sealed, that is when the store
starts the next one: the last block, the one records are appended to, is never compressed.
What a compressed block holds is the plain block's bytes exactly (its block header and
records, each with its checksums, :mod:`jetraft.jetstream.store_format`), so a record's
offset, a block's length and crc32 (a block index file's, a stream snapshot's manifest) and
the bytes a replica serves a peer catching up are the same compressed or not: only the
file changes.

The plain bytes are cut in chunks of :data:`CHUNK_BYTES` and each is compressed on its own,
so that reading one message decompresses the chunk or two it lies in (at most a chunk and
the record), never the whole block, and a flipped bit costs the records of one chunk, not
the block. Each chunk is written in Snappy's block format, which S2 (klauspost/compress, the
codec nats-server writes) extends and every S2 decoder reads, by the ``cramjam`` package; a
chunk that would not get smaller is stored as it is.

Compressed block file (integers little-endian)::

    0   6s  magic b"JRCMP\\n"
    6   u16 format version (1)
    8   u8  algorithm (1: s2)
    9   3x  zero
    12  u32 chunk bytes: plain bytes per chunk (the last chunk holds the rest)
    16  u64 plain length: the plain block's bytes
    24  u32 plain crc32: crc32 of the plain block (what its index file names)
    28  u32 chunks
    32  u32 crc32 of bytes [0, 32) and of the chunk table
    36  4x  zero
    40  chunk table, per chunk: u32 stored length (bit 31: stored as it is, not
        compressed), u32 crc32 of the stored bytes; then the stored chunks, in order

A chunk is used only when its stored bytes match their crc32 and decompress to exactly its
plain length (checked before decompressing: the output is never larger than a chunk); the
records inside still check their own checksums. A chunk that does not is *damaged*: its
plain bytes are unknown, and the records in it are reported and never served, as a damaged
record of a plain block is.

A block is compressed aside (``NNN.blk.tmp``, fdatasynced) and renamed over the plain one;
the directory is fsynced with the store's next sync. A crash at any point leaves either the
plain block or the compressed one under the block's name, both whole (a ``.blk.tmp`` left
behind is removed on open).
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass

import cramjam

from jetraft.storage import fileio

from . import store_format as fmt

__all__ = ["ALGORITHMS", "CHUNK_BYTES", "PACK_HEADER_SIZE", "PACK_MAGIC", "ChunkDamaged", "Packed",
           "chunk_ok", "damaged_chunks", "decode_chunk", "is_packed", "pack_block", "packed_length",
           "read_packed", "stored_len", "unpack", "unpack_file", "write_aside"]

PACK_MAGIC = b"JRCMP\n"
PACK_VERSION = 1
#: Stream ``compression`` values and their algorithm numbers in a compressed block.
ALGORITHMS = {"s2": 1}
#: Plain bytes per compressed chunk (Snappy's own block size: the ratio is a whole buffer's).
CHUNK_BYTES = 64 << 10
#: magic, version, algorithm, chunk bytes, plain length, plain crc, chunks, crc
PACK_HEADER = struct.Struct("<6sHB3xIQIII4x")
PACK_HEADER_SIZE = PACK_HEADER.size                       # 40
_ENTRY = struct.Struct("<II")
_RAW = 1 << 31
#: Chunk sizes a file may name (bounds what one chunk costs to read and decompress).
_MIN_CHUNK, _MAX_CHUNK = 4 << 10, 1 << 20
#: The longest plain block compressed, and the longest a compressed file may name (what
#: opening one may allocate): a block is at most its configured size (8 MiB) plus one
#: message (at most 64 MiB, nats-server's largest max_payload). A longer block stays plain.
MAX_PLAIN = 256 << 20

_crc32 = zlib.crc32
_snappy = cramjam.snappy


class ChunkDamaged(Exception):
    """A chunk of a compressed block fails its checksum or does not decompress to its
    length: the records in it cannot be read."""


@dataclass(slots=True)
class Packed:
    """What a compressed block's header and chunk table say: ``alg``, ``chunk`` plain bytes
    per chunk, ``plain_len`` and ``plain_crc`` of the plain block, and per chunk its file
    offset, stored length (bit 31: stored as it is) and the crc32 of its stored bytes."""

    alg: int
    chunk: int
    plain_len: int
    plain_crc: int
    offs: array
    lens: array
    crcs: array
    file_len: int

    @property
    def chunks(self) -> int:
        return len(self.lens)

    def plain_range(self, i: int) -> tuple[int, int]:
        """The plain bytes ``[a, b)`` chunk ``i`` holds."""
        a = i * self.chunk
        return a, min(a + self.chunk, self.plain_len)


def is_packed(buf) -> bool:
    """Whether ``buf`` (a block file's first bytes) starts as a compressed block."""
    return bytes(buf[:len(PACK_MAGIC)]) == PACK_MAGIC


def pack_block(plain, alg: int = ALGORITHMS["s2"], chunk: int = CHUNK_BYTES) -> bytes:
    """The compressed block file holding the plain block ``plain``. Every chunk is
    decompressed again and compared with its plain bytes before it is kept (a codec fault
    never reaches the disk: ValueError)."""
    mv = memoryview(plain)
    n = len(mv)
    table = bytearray()
    parts = []
    check = bytearray(chunk)
    for a in range(0, n, chunk):
        piece = mv[a:a + chunk]
        comp = bytes(_snappy.compress_raw(piece))
        if len(comp) >= len(piece):
            stored, flag = bytes(piece), _RAW
        else:
            got = _snappy.decompress_raw_into(comp, check)
            if got != len(piece) or check[:got] != piece:
                raise ValueError("s2: a compressed chunk does not decompress to its bytes")
            stored, flag = comp, 0
        table += _ENTRY.pack(len(stored) | flag, _crc32(stored))
        parts.append(stored)
    mv.release()
    head = bytearray(PACK_HEADER.pack(PACK_MAGIC, PACK_VERSION, alg, chunk, n, _crc32(plain),
                                      len(parts), 0))
    struct.pack_into("<I", head, 32, _crc32(table, _crc32(head[:32])))
    return b"".join([bytes(head), bytes(table), *parts])


def read_packed(buf, file_len: int | None = None) -> Packed | None:
    """The header and chunk table at the start of ``buf`` (the file's first bytes, at least
    the table; ``file_len`` the file's length, default ``len(buf)``), or None when they are
    damaged (a crc32 fails, a length is out of its bounds). Raises ValueError for a valid
    header of an unknown format version or algorithm."""
    file_len = len(buf) if file_len is None else file_len
    if len(buf) < PACK_HEADER_SIZE or not is_packed(buf):
        return None
    magic, version, alg, chunk, plain_len, plain_crc, n, crc = PACK_HEADER.unpack_from(buf)
    tend = PACK_HEADER_SIZE + _ENTRY.size * n
    if n > MAX_PLAIN // _MIN_CHUNK or len(buf) < tend:
        return None
    if _crc32(bytes(buf[PACK_HEADER_SIZE:tend]), _crc32(bytes(buf[:32]))) != crc:
        return None
    if version != PACK_VERSION:
        raise ValueError(f"compressed block format version {version} is not supported")
    if alg not in ALGORITHMS.values():
        raise ValueError(f"compressed block algorithm {alg} is not supported")
    if not (_MIN_CHUNK <= chunk <= _MAX_CHUNK) or not (fmt.BLOCK_HEADER_SIZE <= plain_len <= MAX_PLAIN) \
            or n != -(-plain_len // chunk):
        return None
    raw = array("I")
    raw.frombytes(bytes(buf[PACK_HEADER_SIZE:tend]))
    if sys.byteorder == "big":
        raw.byteswap()
    lens, crcs, offs = array("I", raw[0::2]), array("I", raw[1::2]), array("q")
    off = tend
    limit = chunk + chunk // 6 + 32          # Snappy's worst case
    for ln in lens:
        if (ln & ~_RAW) > limit:
            return None
        offs.append(off)
        off += ln & ~_RAW
    return Packed(alg, chunk, plain_len, plain_crc, offs, lens, crcs, file_len)


def stored_len(pb: Packed, i: int) -> int:
    """The bytes chunk ``i`` takes in the file (from ``pb.offs[i]``)."""
    return pb.lens[i] & ~_RAW


def chunk_ok(pb: Packed, i: int, stored) -> bool:
    """Whether ``stored`` (chunk ``i``'s bytes as read) is whole and matches its crc32."""
    return len(stored) == pb.lens[i] & ~_RAW and _crc32(stored) == pb.crcs[i]


def decode_chunk(pb: Packed, i: int, stored) -> bytes:
    """The plain bytes of chunk ``i`` from its stored bytes. Raises ChunkDamaged when they
    fail their crc32 or do not decompress to exactly the chunk's plain length (its length
    is read from the compressed bytes first: nothing larger is ever decompressed)."""
    a, b = pb.plain_range(i)
    if not chunk_ok(pb, i, stored):
        raise ChunkDamaged(f"chunk {i} (plain bytes {a}..{b}) fails its checksum")
    if pb.lens[i] & _RAW:
        if len(stored) != b - a:
            raise ChunkDamaged(f"chunk {i} (plain bytes {a}..{b}) has the wrong length")
        return bytes(stored)
    try:
        if _snappy.decompress_raw_len(stored) != b - a:
            raise ChunkDamaged(f"chunk {i} (plain bytes {a}..{b}) has the wrong length")
        out = bytes(_snappy.decompress_raw(stored))
    except cramjam.DecompressionError as exc:
        raise ChunkDamaged(f"chunk {i} (plain bytes {a}..{b}) does not decompress: {exc}") from None
    if len(out) != b - a:
        raise ChunkDamaged(f"chunk {i} (plain bytes {a}..{b}) has the wrong length")
    return out


def damaged_chunks(buf, pb: Packed) -> list[int]:
    """The chunks of the whole compressed file ``buf`` whose stored bytes fail their crc32
    or lie past its end (no decompression)."""
    mv = memoryview(buf)
    try:
        return [i for i in range(pb.chunks)
                if not chunk_ok(pb, i, mv[pb.offs[i]:pb.offs[i] + stored_len(pb, i)])]
    finally:
        mv.release()


def unpack(buf, pb: Packed) -> tuple[bytes, list[tuple[int, int, int, str]]]:
    """The plain block held by the whole compressed file ``buf``, and its damaged chunks as
    ``(chunk, a, b, detail)``: their plain bytes ``[a, b)`` are left zero (what the
    recovery scan reads as damaged records; the 16-byte block header, the same in every
    block, is put back)."""
    plain = bytearray(pb.plain_len)
    bad = []
    mv = memoryview(buf)
    try:
        for i in range(pb.chunks):
            a, b = pb.plain_range(i)
            try:
                plain[a:b] = decode_chunk(pb, i, mv[pb.offs[i]:pb.offs[i] + stored_len(pb, i)])
            except ChunkDamaged as exc:
                bad.append((i, a, b, str(exc)))
    finally:
        mv.release()
    if bad and bad[0][1] == 0:
        plain[:fmt.BLOCK_HEADER_SIZE] = fmt.encode_block_header()
    return bytes(plain), bad


# --- for a replica aligning its files to a snapshot (jetstream/catchup.py) ---------------

def _read_head(path: str) -> tuple[bytes, int] | None:
    """The first bytes of block file ``path`` up to the end of its chunk table (or fewer)
    and the file's length; None when it is not a compressed block."""
    with open(path, "rb") as f:
        head = f.read(PACK_HEADER_SIZE)
        if not is_packed(head):
            return None
        size = os.fstat(f.fileno()).st_size
        if len(head) == PACK_HEADER_SIZE:
            n = PACK_HEADER.unpack_from(head)[6]
            head += f.read(min(n, MAX_PLAIN // _MIN_CHUNK) * _ENTRY.size)
    return head, size


def packed_length(path: str) -> int | None:
    """None when block file ``path`` is not a compressed block; else the length of the
    plain block it holds (0 when its header is damaged: nothing in it can be trusted).
    Raises OSError."""
    got = _read_head(path)
    if got is None:
        return None
    try:
        pb = read_packed(*got)
    except ValueError:
        return 0
    return 0 if pb is None else pb.plain_len


def unpack_file(path: str, keep: int) -> int:
    """Rewrite compressed block file ``path`` as the plain block it holds, cut to ``keep``
    bytes and before its first damaged chunk; returns the plain length written (0: the
    file is left empty). Written aside, fdatasynced, renamed over ``path``, the directory
    fsynced. Raises OSError (with the path)."""
    with open(path, "rb") as f:
        buf = f.read()
    try:
        pb = read_packed(buf)
    except ValueError:
        pb = None
    plain = bytearray()
    if pb is not None:
        mv = memoryview(buf)
        try:
            for i in range(pb.chunks):
                a, _b = pb.plain_range(i)
                if a >= keep:
                    break
                try:
                    plain += decode_chunk(pb, i, mv[pb.offs[i]:pb.offs[i] + stored_len(pb, i)])
                except ChunkDamaged:
                    break
        finally:
            mv.release()
        del plain[keep:]
    if len(plain) < fmt.BLOCK_HEADER_SIZE:
        plain = bytearray()
    write_aside(path, plain)
    return len(plain)


def write_aside(path: str, data) -> None:
    """Put ``data`` in file ``path`` atomically (:func:`jetraft.storage.fileio.atomic_write`).
    Raises OSError; the ``.tmp`` is removed again when a step fails."""
    fileio.atomic_write(path, data)
