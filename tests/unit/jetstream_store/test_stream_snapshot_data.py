"""jetraft's stream snapshot data (jetstream/snapshot.py): written a chunk at a time from a
store, checked and written back into a new store at the original sequences; every damaged
or cut copy is refused with a clear message and leaves no store behind."""

from __future__ import annotations

import os

import pytest

from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.snapshot import SnapshotDataError, SnapshotWriter, build_restored_store
from jetraft.jetstream.store import FileStore, MemoryStore
from jetraft.jetstream.stream import Stream
from jetraft.storage.group_commit import GroupCommit


def make_stream(store) -> Stream:
    cfg = StreamConfig.from_json({"name": "S", "subjects": ["s.>"]}).checked()
    stream = Stream(cfg, store, created_ns=1)
    for i in range(1, 21):
        store.store(f"s.{i % 4}", b"NATS/1.0\r\nK: v\r\n\r\n" if i % 2 else None, os.urandom(300), 1_000 + i)
    for seq in (1, 2, 7, 20):
        store.remove(seq)
    stream.last_seq = store.state().last_seq
    return stream


def snapshot_bytes(stream: Stream, n: int = 1024) -> bytes:
    writer = SnapshotWriter(stream, {}, no_consumers=True)
    out = bytearray()
    while chunk := writer.read(n):
        assert len(chunk) == n or writer.done
        out += chunk
    return bytes(out)


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_round_trip_keeps_sequences_gaps_headers_and_timestamps(tmp_path, kind):
    src = FileStore(tmp_path / "src", sync=GroupCommit()) if kind == "file" else MemoryStore()
    stream = make_stream(src)
    data = snapshot_bytes(stream)
    path = tmp_path / "snap"
    path.write_bytes(data)
    msgs = str(tmp_path / "dst") if kind == "file" else None
    result = build_restored_store(str(path), msgs)
    dst = FileStore(msgs, sync=GroupCommit()) if kind == "file" else result.store
    a, b = src.state(with_deleted=True), dst.state(with_deleted=True)
    assert (b.first_seq, b.last_seq, b.messages, b.deleted) == (3, 20, 16, [7, 20])
    assert (a.first_seq, a.last_seq, a.messages, a.deleted) == (b.first_seq, b.last_seq, b.messages, b.deleted)
    for seq in range(3, 20):
        if seq != 7:
            assert dst.load(seq) == src.load(seq)
    assert dst.store("s.x", None, b"next", 5_000) == 21


def test_an_emptied_stream_keeps_its_sequences(tmp_path):
    src = MemoryStore()
    stream = make_stream(src)
    src.purge()
    path = tmp_path / "snap"
    path.write_bytes(snapshot_bytes(stream))
    st = build_restored_store(str(path), None).store.state()
    assert (st.messages, st.first_seq, st.last_seq) == (0, 21, 20)


def test_every_damaged_byte_and_every_cut_is_refused(tmp_path):
    data = snapshot_bytes(make_stream(MemoryStore()))
    path = tmp_path / "snap"
    msgs = tmp_path / "dst"
    for pos in range(0, len(data), max(1, len(data) // 97)):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        path.write_bytes(bytes(bad))
        with pytest.raises(SnapshotDataError, match="snapshot data is|not a jetraft stream snapshot"):
            build_restored_store(str(path), str(msgs))
        assert not msgs.exists()
    for cut in (0, 5, 40, len(data) // 2, len(data) - 33, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(SnapshotDataError, match="truncated|corrupt|not a jetraft"):
            build_restored_store(str(path), str(msgs))
        assert not msgs.exists()


def test_a_nats_server_backup_is_named_as_such(tmp_path):
    path = tmp_path / "snap"
    path.write_bytes(b"\xff\x06\x00\x00sNaPpY" + b"\x00" * 100)
    with pytest.raises(SnapshotDataError, match="a nats-server backup does not restore into jetraft"):
        build_restored_store(str(path), None)


def test_the_storage_limit_is_held(tmp_path):
    path = tmp_path / "snap"
    path.write_bytes(snapshot_bytes(make_stream(MemoryStore())))
    with pytest.raises(SnapshotDataError, match="exceed the limit of 2000 bytes"):
        build_restored_store(str(path), str(tmp_path / "dst"), max_bytes=2000)
    assert not (tmp_path / "dst").exists()
