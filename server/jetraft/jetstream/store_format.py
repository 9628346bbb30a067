"""Block files of the jetraft stream file store: header, records, and the recovery scan.

A stream's messages live in block files ``NNNNNNNNNNNNNNNNNNNN.blk`` (20 decimal digits:
the stream's last sequence + 1 when the block was started, so names increase). Records are
only ever appended to the last block; all integers are little-endian.

Block header (16 bytes)::

    0   6s  magic b"JRMSG\\n"
    6   u16 format version (1)
    8   u32 crc32 of bytes [0, 8)
    12  4 bytes zero

Record (40-byte header, then ``body_len`` bytes: subject (UTF-8, surrogateescape),
headers, data)::

    0   u32 hcrc      crc32 of header bytes [4, 36): length, seq, ts, type, lengths
    4   u32 body_len  bytes
    8   u64 seq       message: its sequence; tombstone: the removed sequence (past
                      the last sequence: the stream skips to it, FileStore.skip_to);
                      purge marker: every sequence below it is removed
    16  u64 ts        message: ns since the epoch; purge marker: the stream's last_ts
    24  u8  type      1 message, 2 tombstone, 3 purge marker
    25  u8  flags     bit 0: the message has a headers block (even an empty one)
    26  u16 subject_len  bytes
    28  u32 headers_len  bytes
    32  u32 reserved (0)
    36  u32 crc       crc32(header[4:36] + body)

The header crc lets the scan trust a record's length and sequence even when its body
flipped a bit: such a message is known by number and reported lost, never served (the
lesson of nats-server #7549: Jepsen's bit flips in ``.blk`` files lost acknowledged
messages silently). Checksums are per record, not chained: messages are removed
individually, and a flipped bit must cost one message, not the rest of the block.

Index file ``NNN.idx`` (a cache beside a block of message records only; see
:class:`BlockIndex`): a 44-byte header (magic ``b"JRIDX\n"``, u16 version 1, u64 block
length, u32 block crc32, u64 first sequence, u32 records, u32 subjects, u32 subject bytes,
u32 crc32 of header and body), then the subjects' lengths (u32 each) and bytes, then the
columns: subject number (i32), size (i32), record bytes (u32), ts (i64) per record.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from dataclasses import dataclass, field

from jetraft.raft.storage import wal

BLOCK_MAGIC = b"JRMSG\n"
BLOCK_VERSION = 1
BLOCK_HEADER = struct.Struct("<6sHI4x")
BLOCK_HEADER_SIZE = BLOCK_HEADER.size                     # 16
RECORD_HEADER = struct.Struct("<IIQQBBHIII")
RECORD_MID = struct.Struct("<IQQBBHII")                   # header bytes [4, 36)
HEADER_SIZE = RECORD_HEADER.size                          # 40
REC_MSG, REC_TOMBSTONE, REC_PURGE = 1, 2, 3
FLAG_HEADERS = 1
#: Largest body accepted when scanning; a larger length means a damaged header.
MAX_BODY = 1 << 30

_crc32 = zlib.crc32
_unpack_hdr = RECORD_HEADER.unpack_from


def block_name(first_seq: int) -> str:
    """The file name of a block started when the stream's next sequence was ``first_seq``
    (the RAFT segments' 20-digit naming, extension ``.blk``)."""
    return wal.segment_name(first_seq)[:-4] + ".blk"


def parse_block_name(name: str) -> int | None:
    """The number in a block file name, or None if ``name`` is not a block file."""
    return wal.parse_segment_name(name[:-4] + ".log") if name.endswith(".blk") else None


def encode_block_header() -> bytes:
    """The 16-byte header of a new block."""
    head = BLOCK_MAGIC + struct.pack("<H", BLOCK_VERSION)
    return BLOCK_HEADER.pack(BLOCK_MAGIC, BLOCK_VERSION, _crc32(head))


def check_block_header(buf) -> bool | None:
    """True if ``buf`` starts with a valid block header, None if it is shorter than one or
    all zero (a block whose creation was torn), False if it is damaged. Raises ValueError
    for a valid header of an unknown format version."""
    if len(buf) < BLOCK_HEADER_SIZE or not any(buf[:BLOCK_HEADER_SIZE]):
        return None
    magic, version, crc = BLOCK_HEADER.unpack_from(buf)
    if magic != BLOCK_MAGIC or _crc32(bytes(buf[:8])) != crc:
        return False
    if version != BLOCK_VERSION:
        raise ValueError(f"message block format version {version} is not supported")
    return True


def encode_record(out: bytearray, rtype: int, seq: int, ts: int, subject: bytes = b"",
                  headers: bytes | None = None, data: bytes = b"") -> None:
    """Append one record to ``out``. ``ts`` in ns; ``headers`` None means no headers."""
    hdr = headers or b""
    flags = FLAG_HEADERS if headers is not None else 0
    blen = len(subject) + len(hdr) + len(data)
    mid = RECORD_MID.pack(blen, seq, ts, rtype, flags, len(subject), len(hdr), 0)
    crc = _crc32(data, _crc32(hdr, _crc32(subject, _crc32(mid))))
    start = len(out)
    out += bytes(HEADER_SIZE)
    RECORD_HEADER.pack_into(out, start, _crc32(mid), blen, seq, ts, rtype, flags, len(subject),
                   len(hdr), 0, crc)
    out += subject
    out += hdr
    out += data


@dataclass(slots=True)
class Record:
    """One record as read back: ``off`` its file offset, ``size`` header + body in bytes."""

    off: int
    size: int
    rtype: int
    seq: int
    ts: int
    flags: int
    subject_len: int
    headers_len: int
    ok: bool = True         # False: a message whose header checked out but body did not
    gap: int = 0            # bytes of damaged records skipped right before this one


def read_header(buf, off: int) -> tuple[Record, int] | None:
    """``(record, crc)`` from the 40-byte header at ``off`` if it is complete and its hcrc
    checks out, else None."""
    if len(buf) - off < HEADER_SIZE:
        return None
    hcrc, blen, seq, ts, rtype, flags, slen, hlen, _res, crc = _unpack_hdr(buf, off)
    if _crc32(buf[off + 4:off + 36]) != hcrc or blen > MAX_BODY or slen + hlen > blen:
        return None
    return Record(off, HEADER_SIZE + blen, rtype, seq, ts, flags, slen, hlen), crc


def body_ok(buf, rec: Record, crc: int) -> bool:
    """Whether the body of ``rec`` (complete in ``buf``, header included) matches ``crc``."""
    off = rec.off
    return _crc32(buf[off + HEADER_SIZE:off + rec.size], _crc32(buf[off + 4:off + 36])) == crc


def decode_message(buf, rec: Record) -> tuple[str, bytes | None, bytes]:
    """``(subject, headers, data)`` of a checked message record held in ``buf`` from
    offset 0 (``buf`` holds exactly the record)."""
    a = HEADER_SIZE + rec.subject_len
    b = a + rec.headers_len
    subject = bytes(buf[HEADER_SIZE:a]).decode("utf-8", "surrogateescape")
    headers = bytes(buf[a:b]) if rec.flags & FLAG_HEADERS else None
    return subject, headers, bytes(buf[b:rec.size])


@dataclass(slots=True)
class Damage:
    """A range of a block that is not valid records: ``kind`` "torn_tail" (the end of the
    last block: truncate at ``offset``) or "checksum_mismatch"; ``seq`` the message
    sequence the damaged record names when its header checked out (else 0)."""

    kind: str
    offset: int
    seq: int
    detail: str


@dataclass(slots=True)
class BlockScan:
    """The records of one block in file order whose headers checked out (``ok`` False: a
    message whose body did not), the damage found, and ``end``: the offset after the last
    byte worth keeping (the truncation point of a torn tail)."""

    records: list[Record] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    end: int = 0


def scan_block(buf, is_last: bool, start: int = BLOCK_HEADER_SIZE) -> BlockScan:
    """Walk the records of a block's bytes ``buf`` from offset ``start`` (a record
    boundary: by default the first record, after the block header).

    A record whose header checks out but whose body does not is a checksum mismatch of
    that one record (its sequence is known). A damaged header means the lengths cannot be
    trusted: the scan looks for the next offset where a whole record checks out and goes on
    from there (a false match needs two crc32s to agree by chance). The tail of the last
    block is torn, and truncated at ``end``, when it is an incomplete record header, a
    record whose body runs past the end, or damaged bytes with no valid record after them.
    """
    size = len(buf)
    scan = BlockScan(end=size)
    off = start
    gap = 0
    while off < size:
        got = read_header(buf, off)
        if got is not None:
            rec, crc = got
            if off + rec.size > size:
                scan.damage.append(Damage("torn_tail" if is_last else "checksum_mismatch", off,
                                          0, "record runs past the end of the block"))
                scan.end = off
                break
            rec.gap, gap = gap, 0
            scan.records.append(rec)
            if not body_ok(buf, rec, crc):
                rec.ok = rec.rtype != REC_MSG    # no body: the trusted header is the record
                scan.damage.append(Damage("checksum_mismatch", off, rec.seq,
                                          "record checksum mismatch"))
            off += rec.size
            continue
        nxt = _resync(buf, off + 1)
        if nxt is None:
            torn = size - off < HEADER_SIZE or not any(buf[off:])
            kind = "torn_tail" if is_last else "checksum_mismatch"
            scan.damage.append(Damage(kind, off, 0, "incomplete record header" if torn
                                      else "damaged record header, nothing valid after it"))
            scan.end = off
            break
        scan.damage.append(Damage("checksum_mismatch", off, 0, "damaged record header"))
        gap = nxt - off
        off = nxt
    return scan


def _resync(buf, start: int) -> int | None:
    """The first offset >= ``start`` where a whole, valid record starts, or None."""
    size = len(buf)
    for off in range(start, size - HEADER_SIZE + 1):
        got = read_header(buf, off)
        if got is not None and off + got[0].size <= size and body_ok(buf, got[0], got[1]):
            return off
    return None


# --- block index files: a block's index columns, so that opening need not walk it -------

INDEX_MAGIC = b"JRIDX\n"
INDEX_VERSION = 1
#: magic, version, block_size, block_crc, base, n, nsubj, names_len, crc
INDEX_HEADER = struct.Struct("<6sHQIQIIII")
INDEX_HEADER_SIZE = INDEX_HEADER.size                     # 44


def index_name(first_seq: int) -> str:
    """The file name of the index of block ``first_seq`` (``NNN.idx`` beside ``NNN.blk``)."""
    return block_name(first_seq)[:-4] + ".idx"


def parse_index_name(name: str) -> int | None:
    """The number in an index file name, or None if ``name`` is not one."""
    return parse_block_name(name[:-4] + ".blk") if name.endswith(".idx") else None


@dataclass(slots=True)
class BlockIndex:
    """What an index file holds for a block of message records only, in sequence
    ``base, base + 1, ...``: the block's length (bytes) and crc32 when it was written (an
    index is used only when both still match the block: a cut, grown or damaged block
    is walked instead), the block's subjects, and per record: subject (an index into
    ``names``), size (bytes it counts for), record bytes,
    ts (ns). A record's offset is the block header plus the record bytes before it. The
    index describes the block's own records only (every message present), so that a
    store opened from it is exactly the store the block's bytes give."""

    block_size: int
    block_crc: int
    base: int
    names: list[str]
    subj: array
    size: array
    rsz: array
    ts: array


def _le(a: array) -> bytes:
    if sys.byteorder == "big":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_le(typecode: str, buf) -> array:
    a = array(typecode)
    a.frombytes(buf)
    if sys.byteorder == "big":
        a.byteswap()
    return a


def encode_index(ix: BlockIndex) -> bytes:
    """The bytes of an index file. Raises OverflowError when a column does not fit its
    width (a record of 2 GiB or more): such a block has no index."""
    raw = [n.encode("utf-8", "surrogateescape") for n in ix.names]
    lens = array("I", [len(r) for r in raw])
    blob = b"".join(raw)
    body = b"".join((_le(lens), blob, _le(array("i", ix.subj)), _le(array("i", ix.size)),
                     _le(array("I", ix.rsz)), _le(array("q", ix.ts))))
    head = INDEX_HEADER.pack(INDEX_MAGIC, INDEX_VERSION, ix.block_size, ix.block_crc, ix.base,
                             len(ix.subj), len(raw), len(blob), 0)
    crc = _crc32(body, _crc32(head[:-4]))
    return head[:-4] + struct.pack("<I", crc) + body


def decode_index(buf) -> BlockIndex | None:
    """The index in ``buf``, or None when it is not a whole, valid index file of this
    version (its own crc32 over header and body fails, or its lengths do not add up)."""
    if len(buf) < INDEX_HEADER_SIZE:
        return None
    magic, version, bsize, bcrc, base, n, nsubj, names_len, crc = INDEX_HEADER.unpack_from(buf)
    if magic != INDEX_MAGIC or version != INDEX_VERSION:
        return None
    if len(buf) != INDEX_HEADER_SIZE + 4 * nsubj + names_len + 20 * n:
        return None
    mv = memoryview(buf)
    try:
        if _crc32(mv[INDEX_HEADER_SIZE:], _crc32(mv[:INDEX_HEADER_SIZE - 4])) != crc:
            return None
        off = INDEX_HEADER_SIZE
        lens = _from_le("I", mv[off:off + 4 * nsubj])
        off += 4 * nsubj
        names = []
        for ln in lens:
            names.append(bytes(mv[off:off + ln]).decode("utf-8", "surrogateescape"))
            off += ln
        if off != INDEX_HEADER_SIZE + 4 * nsubj + names_len:
            return None
        cols = []
        for code, width in (("i", 4), ("i", 4), ("I", 4), ("q", 8)):
            cols.append(_from_le(code, mv[off:off + width * n]))
            off += width * n
    finally:
        mv.release()
    subj = cols[0]
    if n and (max(subj) >= nsubj or min(subj) < 0):
        return None
    return BlockIndex(bsize, bcrc, base, names, *cols)
