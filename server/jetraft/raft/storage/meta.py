"""The small files beside a group's segments: hard state and snapshot.

``hardstate`` holds two 4096-byte slots, each ``u32 length, u32 crc32, msgpack [seq, term,
vote, commit]``. A write goes to the slot that does *not* hold the last fsynced state and
is done in place (``pwrite``, no rename, no directory fsync); the reader takes the valid
slot with the highest ``seq``. A torn write therefore damages only a state that was never
acknowledged, and the last durable state stays readable (the "double write" of
LMDB's meta pages).

``snapshot`` is ``magic b"JRSNAP\\n", u8 version, u64 body length, u32 crc32`` then the
msgpack body ``[index, term, [peers...], data]``, plus ``[learners...]`` when there are
any; the crc covers the header's first 16 bytes and the body. It is replaced atomically: write ``snapshot.tmp``, fsync, rename over
``snapshot``, fsync the directory (the protocol of etcd's snap/ and of SQLite's journal).
"""

from __future__ import annotations

import os
import struct
import zlib

import msgpack

from jetraft.raft.types import HardState, Snapshot
from jetraft.storage import fileio
from jetraft.storage.group_commit import GroupCommit, StorageError, storage_error

HARDSTATE_FILE = "hardstate"
SNAPSHOT_FILE = "snapshot"
SLOT_SIZE = 4096
_SLOT_HEADER = struct.Struct("<II")
_SNAP_MAGIC = b"JRSNAP\n"
_SNAP_VERSION = 1
_SNAP_HEADER = struct.Struct("<7sBQI")


def encode_hard_state_slot(seq: int, hs: HardState) -> bytes:
    """One slot's bytes. Raises ValueError if the vote is too long to fit (> ~4 KiB)."""
    body = msgpack.packb([seq, hs.term, hs.vote, hs.commit])
    if len(body) > SLOT_SIZE - _SLOT_HEADER.size:
        raise ValueError("hard state does not fit its slot (vote too long)")
    return _SLOT_HEADER.pack(len(body), zlib.crc32(body)) + body


def decode_hard_state(buf: bytes) -> tuple[int, int, HardState] | None:
    """``(slot, seq, HardState)`` of the newest valid slot in a hardstate file's bytes, or
    None when neither slot checks out."""
    best = None
    for slot in (0, 1):
        raw = buf[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE]
        if len(raw) < _SLOT_HEADER.size:
            continue
        length, crc = _SLOT_HEADER.unpack_from(raw)
        body = raw[_SLOT_HEADER.size:_SLOT_HEADER.size + length]
        if length == 0 or len(body) != length or zlib.crc32(body) != crc:
            continue
        try:
            seq, term, vote, commit = msgpack.unpackb(body)
        except (ValueError, TypeError, msgpack.UnpackException):
            continue
        if best is None or seq > best[1]:
            best = (slot, seq, HardState(term, vote, commit))
    return best


def encode_snapshot(snap: Snapshot) -> bytes:
    """The snapshot file's bytes."""
    fields = [snap.index, snap.term, list(snap.peers), snap.data]
    if snap.learners:
        fields.append(list(snap.learners))
    body = msgpack.packb(fields)
    head = _SNAP_HEADER.pack(_SNAP_MAGIC, _SNAP_VERSION, len(body), 0)[:16]
    crc = zlib.crc32(body, zlib.crc32(head))
    return head + struct.pack("<I", crc) + body


def decode_snapshot(buf: bytes) -> Snapshot:
    """The snapshot in a snapshot file's bytes. Raises ValueError when the file is short,
    fails its checksum or does not decode."""
    if len(buf) < _SNAP_HEADER.size:
        raise ValueError("snapshot file too short")
    magic, version, length, crc = _SNAP_HEADER.unpack_from(buf)
    body = buf[_SNAP_HEADER.size:]
    if magic != _SNAP_MAGIC or len(body) != length:
        raise ValueError("snapshot file header is damaged or the file is truncated")
    if zlib.crc32(body, zlib.crc32(buf[:16])) != crc:
        raise ValueError("snapshot file checksum mismatch")
    if version != _SNAP_VERSION:
        raise ValueError(f"snapshot format version {version} is not supported")
    try:
        index, term, peers, data, *rest = msgpack.unpackb(body)
        learners = rest[0] if rest else ()
        if len(rest) > 1:
            raise ValueError(f"{len(rest)} fields past the data")
        return Snapshot(int(index), int(term), tuple(str(p) for p in peers), bytes(data),
                        tuple(str(p) for p in learners))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ValueError(f"snapshot body does not decode: {exc}") from exc


def write_all(fd: int, data: bytes, offset: int, path: str = "") -> None:
    """pwrite all of ``data`` at ``offset`` (bytes), looping on short writes (OSError
    ENOSPC when a write makes no progress); through the :mod:`.fileio` seam."""
    fileio.pwrite_all(fd, data, offset, path)


def write_atomic(directory: str, name: str, data: bytes, sync: GroupCommit) -> None:
    """Replace ``directory/name`` with ``data`` durably: temp file, fsync, rename, fsync
    the directory. A crash leaves the old file or the new one, never a mix. Raises
    StorageError (with errno and path) when a step fails; the old file is then intact and
    the temp file is removed when possible."""
    tmp = os.path.join(directory, name + ".tmp")
    try:
        fd = fileio.open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, fileio.FILE_MODE)
        try:
            write_all(fd, data, 0, tmp)
            sync.fsync_now(fd, tmp)
        finally:
            os.close(fd)
        fileio.replace(tmp, os.path.join(directory, name))
    except (OSError, StorageError) as exc:
        try:
            fileio.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, StorageError):
            raise
        raise storage_error("write", tmp, exc) from exc
    sync.fsync_dir_now(directory)


def read_file(path: str) -> bytes | None:
    """The whole file, or None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
