"""Segment files and their records: the on-disk format of a group's RAFT log.

A group's log is a sequence of segment files ``NNNNNNNNNNNNNNNNNNNN.log`` (20 decimal
digits: the index of the segment's first entry). Each segment starts with a 32-byte header
and holds entry records with consecutive indexes; all integers little-endian.

Segment header (32 bytes)::

    0   6s  magic b"JRWAL\\n"
    6   u16 format version (1)
    8   u64 first index (equals the file name)
    16  u32 prev_crc: the chained crc of the last record of the previous segment
    20  u32 crc32 of bytes [0, 20)
    24  8 bytes zero

Record (32-byte header, then ``body_len`` bytes of entry data)::

    0   u32 hcrc   crc32 of header bytes [4, 28): protects length, term, index and types
    4   u32 body_len
    8   u64 term
    16  u64 index
    24  u8  record type (1 = entry)
    25  u8  entry type (types.EntryType)
    26  u16 flags (0)
    28  u32 crc    crc32(header[4:28] + body), seeded with the previous record's crc

The crc is chained (as etcd wal/ does with its rolling crc): each record's checksum
depends on every record before it in the log, and a segment's header names the crc it
continues from. A stale record that survives a crash after a truncation (the OS wrote the
new records but not the new file length) therefore fails its check, and a segment left over
from a truncated suffix does not join the log. The header crc tells a torn or zeroed tail
(the record's length cannot be trusted) from a record whose body flipped a bit.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from jetraft.raft.types import Entry, EntryType

SEGMENT_MAGIC = b"JRWAL\n"
SEGMENT_VERSION = 1
SEGMENT_HEADER = struct.Struct("<6sHQII8x")
RECORD_HEADER = struct.Struct("<IIQQBBHI")
RECORD_MID = struct.Struct("<IQQBBH")          # header bytes [4, 28)
HEADER_SIZE = RECORD_HEADER.size               # 32
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size      # 32
RECORD_ENTRY = 1
#: Largest body accepted when reading; a larger length is treated as a damaged header.
MAX_BODY = 1 << 31

_crc32 = zlib.crc32
_pack_mid = RECORD_MID.pack
_pack_into_hdr = RECORD_HEADER.pack_into
_unpack_hdr = RECORD_HEADER.unpack_from


def segment_name(first_index: int) -> str:
    """The file name of the segment whose first entry has ``first_index``."""
    return f"{first_index:020d}.log"


def parse_segment_name(name: str) -> int | None:
    """The first index encoded in a segment file name, or None if not a segment name."""
    if len(name) == 24 and name.endswith(".log") and name[:20].isdigit():
        return int(name[:20])
    return None


def encode_segment_header(first_index: int, prev_crc: int) -> bytes:
    """The 32-byte header of a new segment."""
    head = struct.pack("<6sHQI", SEGMENT_MAGIC, SEGMENT_VERSION, first_index, prev_crc)
    return SEGMENT_HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, first_index, prev_crc,
                               _crc32(head))


def decode_segment_header(buf: bytes) -> tuple[int, int] | None:
    """``(first_index, prev_crc)`` from a segment header, or None if it is short or fails
    its checksum. Raises ValueError for a valid header of an unknown format version."""
    if len(buf) < SEGMENT_HEADER_SIZE:
        return None
    magic, version, first, prev_crc, crc = SEGMENT_HEADER.unpack_from(buf)
    if _crc32(buf[:20]) != crc or magic != SEGMENT_MAGIC:
        return None
    if version != SEGMENT_VERSION:
        raise ValueError(f"segment format version {version} is not supported")
    return first, prev_crc


def encode_records(entries: list[Entry], prev_crc: int, out: bytearray, base: int,
                   offsets: list[int], crcs: list[int], lens: list[int]) -> int:
    """Append the records of ``entries`` to ``out``, which will be written at file offset
    ``base`` (bytes); append each record's file offset, chained crc and body length (bytes)
    to ``offsets``/``crcs``/``lens``. Returns the crc of the last record."""
    crc = prev_crc
    hdr = bytearray(HEADER_SIZE)
    for e in entries:
        offsets.append(base + len(out))
        data = e.data
        mid = _pack_mid(len(data), e.term, e.index, RECORD_ENTRY, e.type, 0)
        crc = _crc32(data, _crc32(mid, crc))
        _pack_into_hdr(hdr, 0, _crc32(mid), len(data), e.term, e.index, RECORD_ENTRY,
                       e.type, 0, crc)
        out += hdr
        out += data
        crcs.append(crc)
        lens.append(len(data))
    return crc


def decode_record(buf, off: int, prev_crc: int) -> Entry | None:
    """The entry whose record starts at ``off`` in ``buf`` if it checks out against
    ``prev_crc``, else None."""
    if len(buf) - off < HEADER_SIZE:
        return None
    hcrc, blen, term, index, rtype, etype, _flags, crc = _unpack_hdr(buf, off)
    mid = bytes(buf[off + 4:off + 28])
    end = off + HEADER_SIZE + blen
    if _crc32(mid) != hcrc or end > len(buf):
        return None
    data = bytes(buf[off + HEADER_SIZE:end])
    if _crc32(data, _crc32(mid, prev_crc)) != crc or rtype != RECORD_ENTRY:
        return None
    return Entry(term, index, EntryType(etype), data)


@dataclass(slots=True)
class Problem:
    """Where a segment stops being a valid log: ``kind`` is "torn_tail" (an incomplete or
    failing last record of the last segment: truncate at ``offset``) or "checksum_mismatch"
    (anything else: the log is corrupt from ``offset`` on). ``index`` is the entry index
    that was expected there."""

    kind: str
    offset: int
    index: int
    detail: str


@dataclass(slots=True)
class Scan:
    """The valid records of one segment, in parallel lists (index ``first + k``), the crc
    the last one ends with, and the problem that ended the scan (None: clean to EOF)."""

    first: int
    terms: list[int]
    offsets: list[int]
    crcs: list[int]
    lens: list[int]
    configs: list[tuple[int, bytes]]
    last_crc: int
    problem: Problem | None


def scan_segment(buf, first: int, prev_crc: int, is_last: bool) -> Scan:
    """Validate the records of a segment whose header was checked (records start at offset
    32, the first has index ``first`` and chains from ``prev_crc``).

    A failing record is a torn tail only in the last segment and only when nothing valid
    can follow it: its header is incomplete, its header checks out but the body runs past
    EOF or ends exactly at EOF with a bad crc, or its header is bad and every byte after it
    is zero. Everything else is a checksum mismatch.
    """
    terms: list[int] = []
    offsets: list[int] = []
    crcs: list[int] = []
    lens: list[int] = []
    configs: list[tuple[int, bytes]] = []
    size = len(buf)
    off = SEGMENT_HEADER_SIZE
    index = first
    crc = prev_crc
    last_term = 0
    problem = None
    config_type = EntryType.CONFIG_CHANGE
    while off < size:
        torn, detail = False, ""
        if size - off < HEADER_SIZE:
            torn, detail = True, "incomplete record header"
            break
        hcrc, blen, term, rindex, rtype, etype, _flags, rcrc = _unpack_hdr(buf, off)
        mid = buf[off + 4:off + 28]
        if _crc32(mid) != hcrc:
            torn, detail = not any(buf[off:]), "record header checksum mismatch"
            break
        end = off + HEADER_SIZE + blen
        if end > size:
            torn, detail = True, "record runs past the end of the file"
            break
        body = buf[off + HEADER_SIZE:end]
        ncrc = _crc32(body, _crc32(mid, crc))
        if ncrc != rcrc:
            torn, detail = end == size, "record checksum mismatch"
            break
        if rindex != index or rtype != RECORD_ENTRY or term < last_term:
            detail = f"record out of sequence (index {rindex}, term {term})"
            break
        if etype == config_type:
            configs.append((index, bytes(body)))
        terms.append(term)
        offsets.append(off)
        crcs.append(ncrc)
        lens.append(blen)
        crc = ncrc
        last_term = term
        index += 1
        off = end
    if off < size:
        kind = "torn_tail" if torn and is_last else "checksum_mismatch"
        problem = Problem(kind, off, index, detail)
    return Scan(first, terms, offsets, crcs, lens, configs, crc, problem)


def highest_index_after(buf, off: int) -> int:
    """The highest entry index named by the well-formed record headers from ``off`` on (0 if
    none): an estimate of how far a corrupt range reaches. The (bad) record at ``off`` is
    skipped by its stated length; the walk stops at the next bad header."""
    best = 0
    size = len(buf)
    first = True
    while size - off >= HEADER_SIZE:
        hcrc, blen, _term, index, *_ = _unpack_hdr(buf, off)
        if _crc32(buf[off + 4:off + 28]) == hcrc:
            best = max(best, index)
        elif not first:
            break
        first = False
        off += HEADER_SIZE + blen
    return best
