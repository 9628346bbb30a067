"""Stream snapshot data as an attacker would write it: any header, records and end record,
with a correct digest (jetstream/snapshot.py's format), and the Snappy framing a client
sends. Used by the restore tests and the fuzz targets."""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack
import snappy

from jetraft.jetstream.snapshot import FORMAT, MAGIC, VERSION
from jetraft.jetstream.snapshot_frames import STREAM_IDENTIFIER

__all__ = ["forge", "frame", "header", "with_digest"]


def header(first_seq: int = 1, last_seq: int = 1, messages: int = 1, nbytes: int = 0,
           replica: dict | None = None, **extra: Any) -> dict:
    """A snapshot header (extra keys are added as given)."""
    return {"format": FORMAT, "version": VERSION, "store": [first_seq, last_seq, messages, nbytes],
            "replica": replica if replica is not None else {}, **extra}


def with_digest(body: bytes) -> bytes:
    """``MAGIC + body`` and its SHA-256, as the format ends."""
    data = MAGIC + body
    return data + hashlib.sha256(data).digest()


def forge(hdr: dict | bytes, records: list, end: dict | None = None) -> bytes:
    """Snapshot data: ``hdr`` (a dict, or raw msgpack bytes), ``records`` (lists
    ``[seq, subject, headers, data, ts]`` or raw bytes), the end record (by default the
    one that matches: every record counted, ``last_seq`` from the header)."""
    body = hdr if isinstance(hdr, bytes) else msgpack.packb(hdr, use_bin_type=True)
    parts = [body]
    for rec in records:
        parts.append(rec if isinstance(rec, bytes) else msgpack.packb(rec, use_bin_type=True))
    if end is None:
        last = hdr["store"][1] if isinstance(hdr, dict) else 0
        end = {"end": True, "messages": len(records), "last_seq": last}
    parts.append(msgpack.packb(end, use_bin_type=True))
    return with_digest(b"".join(parts))


def frame(data: bytes) -> bytes:
    """``data`` in Snappy's framing format (what a restore client sends), compressed."""
    return snappy.StreamCompressor().add_chunk(data) if data else STREAM_IDENTIFIER
