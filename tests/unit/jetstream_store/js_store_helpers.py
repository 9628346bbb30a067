"""Helpers for the jetraft stream store tests: store factories, a crash simulator and
state comparison.

The crash simulator is the RAFT storage tests' ``CrashFS`` (it records what each fsync
made durable and puts a directory back to exactly that); ``tear_last_record`` then leaves
a prefix of the last record of the last block, as a crash in the middle of a write may.
"""

from __future__ import annotations

import importlib.util
import os

from jetraft.jetstream.store import FileStore, MemoryStore
from jetraft.jetstream.store_format import HEADER_SIZE, read_header
from jetraft.storage.group_commit import GroupCommit

_spec = importlib.util.spec_from_file_location(
    "raft_storage_helpers",
    os.path.join(os.path.dirname(__file__), os.pardir, "raft_storage",
                 "raft_storage_helpers.py"))
_raft_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_raft_helpers)
CrashFS = _raft_helpers.CrashFS
Faults = _raft_helpers.Faults


def open_file_store(path, sync: GroupCommit | None = None, **kw) -> FileStore:
    return FileStore(path, sync=sync or GroupCommit(), **kw)


def make_store(kind: str, tmp_path, **kw):
    """A fresh store of ``kind`` ("memory" or "file")."""
    if kind == "memory":
        return MemoryStore()
    return open_file_store(tmp_path / "stream", **kw)


def blocks(path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".blk"))


def record_offsets(path) -> list[tuple[int, int]]:
    """``(offset, size)`` of every record of a block file with clean headers."""
    with open(path, "rb") as f:
        buf = f.read()
    out, off = [], 16
    while off + HEADER_SIZE <= len(buf):
        got = read_header(buf, off)
        if got is None:
            break
        out.append((off, got[0].size))
        off += got[0].size
    return out


def tear_last_record(path, keep: int) -> int:
    """Cut the last record of block ``path`` to its first ``keep`` bytes; returns the
    record's offset."""
    off, _size = record_offsets(path)[-1]
    os.truncate(path, off + keep)
    return off


def flip_bit(path, offset: int, bit: int = 0) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ (1 << bit)]))


def snapshot(store) -> tuple:
    """Everything observable about a store, for comparing two of them."""
    st = store.state(with_deleted=True, subjects_filter=">")
    msgs = []
    seq = st.first_seq
    while (m := store.load_next(">", seq)) is not None:
        msgs.append(m)
        seq = m.seq + 1
    st.lost = []
    return st, msgs
