"""Stream snapshots: what a clustered stream replica's snapshot holds, and how a replica's
store is brought to the state a snapshot describes.

A stream group's snapshot (:class:`StreamSnapshot`) is small: the stream's in-memory state
and every consumer's (``JetStreamAccount.replica_state``), the store's counts, and the
store's *manifest*: its block files and their sizes in bytes. The messages themselves stay
in the stream's file store (:class:`~jetraft.jetstream.store.FileStore`), which is only ever
appended to and starts its blocks at the same sequences on every replica, so every replica
that applied the same entries holds the same bytes: the store at the snapshot is each
manifest block cut to its size. Once the store is fsynced and the snapshot durable, the RAFT
log up to the snapshot is compacted (nats-server snapshots a stream's state the same way and
catches a replica up from the leader's store: server/jetstream_cluster.go
``stateSnapshot``/``processSnapshot``/``runCatchup``).

:func:`align_store` brings a replica's block files to a snapshot's manifest as far as they
go: blocks the snapshot does not list are removed, longer ones cut; what is missing is
returned as byte ranges (:class:`Missing`) to fetch from a peer, which serves them with
``FileStore.read_block`` (see ``net/jetstream/catchup.py``). The FileStore then opened over
the files checks every record; a block where it found damage is cut at the first bad byte
and fetched again from there: nothing that fails a checksum is kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import msgpack

from jetraft.protocol import bounded_msgpack
from jetraft.storage import fileio

from . import store_compress as pack
from . import store_format as fmt

__all__ = ["SNAPSHOT_VERSION", "Alignment", "BlockWriter", "Missing", "StreamSnapshot",
           "StreamSnapshotError", "align_store"]

SNAPSHOT_VERSION = 1
#: What a stream snapshot from a peer may hold: as a restore's header (the same replica
#: state, jetstream/snapshot.py), and its block manifest.
SNAPSHOT_LIMITS = bounded_msgpack.Limits(max_units=2_000_000, max_container=2_000_000,
                                         max_str=1 << 20, max_bin=1 << 20, max_buffer=256 << 20)


class StreamSnapshotError(ValueError):
    """A stream snapshot that cannot be decoded or does not check."""


@dataclass(slots=True)
class StreamSnapshot:
    """One stream replica's snapshot. ``blocks``: the store's manifest, ``[(first_seq,
    size_bytes), ...]``; ``block_bytes``: the store's block size setting; ``first_seq``,
    ``last_seq``, ``messages``, ``bytes``: the store's state then (checked after the store is
    reopened); ``last_ts``: the largest entry ts applied (ns); ``state``: the account's
    ``replica_state`` of the stream (msgpack-safe)."""

    stream: str
    last_ts: int
    block_bytes: int
    blocks: list[tuple[int, int]]
    first_seq: int
    last_seq: int
    messages: int
    bytes: int
    state: dict = field(default_factory=dict)

    def encode(self) -> bytes:
        return msgpack.packb({
            "v": SNAPSHOT_VERSION, "stream": self.stream, "last_ts": self.last_ts,
            "block_bytes": self.block_bytes, "blocks": [list(b) for b in self.blocks],
            "store": [self.first_seq, self.last_seq, self.messages, self.bytes],
            "state": self.state}, use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes) -> StreamSnapshot:
        """Decode ``data`` within :data:`SNAPSHOT_LIMITS` (a peer's bytes: see
        :mod:`jetraft.protocol.bounded_msgpack`). Raises :class:`StreamSnapshotError` naming
        what is wrong."""
        try:
            m = bounded_msgpack.unpackb(data, SNAPSHOT_LIMITS, "stream snapshot")
        except ValueError as exc:
            raise StreamSnapshotError(f"stream snapshot undecodable: {exc}") from None
        if not isinstance(m, dict):
            raise StreamSnapshotError("stream snapshot is not a map")
        if m.get("v") != SNAPSHOT_VERSION:
            raise StreamSnapshotError(f"stream snapshot version {m.get('v')!r} unsupported "
                                      f"(expected {SNAPSHOT_VERSION})")
        stream, last_ts, bb = m.get("stream"), m.get("last_ts"), m.get("block_bytes")
        blocks, store, state = m.get("blocks"), m.get("store"), m.get("state")
        if not isinstance(stream, str) or not stream:
            raise StreamSnapshotError("stream snapshot: 'stream' must be a name")
        if not _uint(last_ts) or not _uint(bb) or bb < fmt.BLOCK_HEADER_SIZE:
            raise StreamSnapshotError("stream snapshot: bad 'last_ts' or 'block_bytes'")
        if not isinstance(blocks, list) or not all(
                isinstance(b, list) and len(b) == 2 and _uint(b[0]) and b[0] >= 1 and _uint(b[1])
                and b[1] >= fmt.BLOCK_HEADER_SIZE for b in blocks):
            raise StreamSnapshotError("stream snapshot: 'blocks' must be [[first_seq, size], ...]")
        starts = [b[0] for b in blocks]
        if starts != sorted(set(starts)):
            raise StreamSnapshotError("stream snapshot: blocks out of order or repeated")
        if not isinstance(store, list) or len(store) != 4 or not all(_uint(x) for x in store):
            raise StreamSnapshotError("stream snapshot: 'store' must be [first, last, messages, bytes]")
        if not isinstance(state, dict):
            raise StreamSnapshotError("stream snapshot: 'state' must be a map")
        return cls(stream, last_ts, bb, [(b[0], b[1]) for b in blocks], *store, state=state)

    @property
    def store_bytes(self) -> int:
        """Bytes of every manifest block (what a replica with no store fetches)."""
        return sum(size for _, size in self.blocks)


def _uint(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


@dataclass(slots=True)
class Missing:
    """Bytes ``[have, want)`` of block ``first_seq`` are to be fetched."""

    first_seq: int
    have: int
    want: int


@dataclass(slots=True)
class Alignment:
    """What :func:`align_store` found: ``missing`` ranges (in block order), ``damage`` (one
    dict per problem: ``file``, ``offset``, ``kind``, ``detail``), ``removed`` block file
    names no longer part of the store."""

    missing: list[Missing] = field(default_factory=list)
    damage: list[dict] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def bytes_needed(self) -> int:
        return sum(m.want - m.have for m in self.missing)


def align_store(msgs_dir: str, snap: StreamSnapshot, *, expect_complete: bool,
                cuts: dict[int, int] | None = None) -> Alignment:
    """Bring the block files in ``msgs_dir`` to ``snap``'s manifest as far as their sizes go
    and return what is left to fetch: blocks the manifest does not list are removed (and
    blocks a FileStore set aside as ``.corrupt``), longer ones cut to their size, and a block
    named in ``cuts`` (first_seq -> offset of its first bad byte, from a FileStore's
    ``recovery_report``) cut there; a compressed block (jetstream/store_compress.py) counts
    by the plain bytes it holds, and is written back plain when it is to be cut or
    completed. The records are checked by the FileStore that is opened
    over the files afterwards. ``expect_complete``: the files should hold the whole
    manifest (this replica took the snapshot itself and fsynced its store first), so a
    block that is short or absent is reported as damage. Raises OSError (with the path)."""
    fileio.make_dirs(msgs_dir)
    want = dict(snap.blocks)
    cuts = cuts or {}
    out = Alignment()
    present: dict[int, str] = {}
    changed_dir = False
    for name in sorted(os.listdir(msgs_dir)):
        path = os.path.join(msgs_dir, name)
        start = fmt.parse_block_name(name)
        if start is None and name.endswith(".corrupt"):
            start = -1
        if start is None:
            continue
        if start not in want:
            fileio.unlink(path)
            out.removed.append(name)
            changed_dir = True
            continue
        present[start] = path
    for start, size in snap.blocks:
        name = fmt.block_name(start)
        path = present.get(start)
        if path is None:
            if expect_complete:
                out.damage.append({"file": name, "offset": 0, "kind": "missing_block",
                                   "detail": f"block of {size} bytes is missing"})
            out.missing.append(Missing(start, 0, size))
            continue
        length = os.stat(path).st_size
        plain = pack.packed_length(path)        # a compressed block: its plain bytes count
        if plain is not None:
            length = plain
            if plain == size and cuts.get(start, size) >= size:
                continue                        # whole, nothing to cut: stays compressed
        keep = min(length, size, cuts.get(start, size))
        if keep < fmt.BLOCK_HEADER_SIZE:
            keep = 0
        if length < size and start not in cuts and expect_complete:
            out.damage.append({"file": name, "offset": length, "kind": "short_block",
                               "detail": f"block holds {length} of its {size} bytes"})
        if plain is not None:                   # plain again, cut (and before a damaged chunk)
            keep = pack.unpack_file(path, keep)
        elif keep != length:
            fd = fileio.open_file(path, os.O_RDWR)
            try:
                fileio.ftruncate(fd, keep, path)
                fileio.fdatasync(fd, path)
            finally:
                os.close(fd)
        if keep < size:
            out.missing.append(Missing(start, keep, size))
    if changed_dir:
        fileio.sync_directory(msgs_dir)
    return out


class BlockWriter:
    """Writes fetched bytes into the block files of ``msgs_dir`` at the offsets they came
    from; :meth:`finish` makes them durable (every file written and the directory
    fsynced). Raises OSError (with the path) on a write error."""

    def __init__(self, msgs_dir: str) -> None:
        self.msgs_dir = msgs_dir
        self._fds: dict[int, tuple[int, str]] = {}
        self._created = False

    def write(self, first_seq: int, offset: int, data: bytes) -> None:
        got = self._fds.get(first_seq)
        if got is None:
            path = os.path.join(self.msgs_dir, fmt.block_name(first_seq))
            existed = os.path.exists(path)
            fd = fileio.open_file(path, os.O_RDWR | os.O_CREAT, fileio.FILE_MODE)
            got = self._fds[first_seq] = (fd, path)
            self._created = self._created or not existed
        fileio.pwrite_all(got[0], data, offset, got[1])

    def finish(self) -> None:
        try:
            for fd, path in self._fds.values():
                fileio.fdatasync(fd, path)
            if self._created:
                fileio.sync_directory(self.msgs_dir)
        finally:
            self.close()

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd, _ in fds.values():
            os.close(fd)
