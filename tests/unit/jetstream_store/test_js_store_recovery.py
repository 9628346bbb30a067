"""FileStore on disk: restart, group commit, crashes, torn tails and bit flips.

Crash model: CrashFS puts the directory back to what the last fsyncs made durable (as
Jepsen's lazyfs does to nats-server, #7564); a torn tail is a prefix of the last record.
"""

from __future__ import annotations

import os

import pytest
from js_store_helpers import (
    CrashFS,
    blocks,
    flip_bit,
    open_file_store,
    record_offsets,
    snapshot,
    tear_last_record,
)

from jetraft.jetstream.store import CorruptMessage, MessageNotFound
from jetraft.jetstream.store_format import HEADER_SIZE
from jetraft.storage.group_commit import GroupCommit


def populate(fs, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        fs.store(f"s.{i % 3}", b"NATS/1.0\r\nK: v\r\n\r\n" if i % 2 else None,
                 f"msg-{i}".encode() * (1 + i % 5), 10_000 + i)


def test_restart_restores_messages_deletes_purges_subjects(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=400)
    populate(fs, 30)
    fs.remove(7)
    fs.remove(29)
    fs.purge("s.1", seq=20)
    fs.compact_to(4)
    fs.sync()
    before = snapshot(fs)
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=400)
    assert fs.recovery_report == []
    assert snapshot(fs) == before
    assert fs.load_last("s.0").seq == before[0].last_seq - 2
    assert fs.store("z", None, b"", 1) == 31
    fs.close()


def test_purge_all_survives_restart_and_frees_blocks(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=300)
    populate(fs, 20)
    assert len(blocks(tmp_path)) > 3
    assert fs.purge() == 20
    fs.sync()
    assert len(blocks(tmp_path)) == 1          # only the last block (it holds the marker)
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=300)
    st = fs.state()
    assert (st.messages, st.first_seq, st.last_seq, st.last_ts) == (0, 21, 20, 10_019)
    assert fs.store("a", None, b"", 5) == 21
    fs.close()


def test_removing_oldest_messages_deletes_their_blocks(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=300)
    populate(fs, 40)
    fs.sync()
    n = len(blocks(tmp_path))
    for seq in range(1, 21):                  # limits enforcement removes from the front
        fs.remove(seq)
    fs.sync()
    assert len(blocks(tmp_path)) < n
    before = snapshot(fs)
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=300)
    assert snapshot(fs) == before
    fs.close()


def test_one_write_and_one_fsync_per_store_and_sync(tmp_path, monkeypatch):
    gc = GroupCommit()
    fs = open_file_store(tmp_path, gc)
    fs.store("a", None, b"x", 1)
    fs.sync()                                  # creates the block: file + directory
    writes = []
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, b, off: writes.append(len(b)) or real(fd, b, off))
    before = gc.fsyncs
    fs.store("a", None, b"y" * 128, 2)
    fs.sync()
    assert len(writes) == 1 and gc.fsyncs - before == 1
    before = gc.fsyncs
    for i in range(64):
        fs.store("a", None, b"z" * 128, 3 + i)
    fs.sync()
    assert len(writes) == 65 and gc.fsyncs - before == 1
    fs.sync()
    assert gc.fsyncs - before == 1             # nothing dirty: no fsync
    fs.close()


def test_sync_always_false_defers_to_forced_sync(tmp_path):
    gc = GroupCommit()
    fs = open_file_store(tmp_path, gc, sync_always=False)
    fs.store("a", None, b"x", 1)
    fs.sync()
    assert gc.fsyncs == 0
    fs.sync(force=True)
    assert gc.fsyncs >= 1
    fs.close()


def test_crash_loses_only_unsynced_writes(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    d = tmp_path / "s"
    fs = open_file_store(d, block_bytes=300)
    populate(fs, 10)
    fs.remove(3)
    fs.sync()
    durable = snapshot(fs)
    populate(fs, 10, start=10)                 # not synced: may be lost
    fs.remove(5)
    fs.purge("s.0")
    fs.close()
    crash.crash(d)
    fs = open_file_store(d, block_bytes=300)
    assert snapshot(fs) == durable
    assert fs.store("a", None, b"", 1) == 11
    fs.close()


def _store_with_tail(tmp_path):
    fs = open_file_store(tmp_path)
    populate(fs, 5)
    fs.sync()
    fs.close()
    return os.path.join(tmp_path, blocks(tmp_path)[-1])


def test_torn_tail_at_every_offset_of_the_last_record(tmp_path):
    path = _store_with_tail(tmp_path)
    with open(path, "rb") as f:
        pristine = f.read()
    off, size = record_offsets(path)[-1]
    for keep in range(1, size):
        with open(path, "wb") as f:
            f.write(pristine)
        tear_last_record(path, keep)
        fs = open_file_store(tmp_path)
        assert [(r["kind"], r["offset"]) for r in fs.recovery_report] == [("torn_tail", off)], keep
        st = fs.state()
        assert (st.messages, st.last_seq, st.lost) == (4, 4, []), keep
        assert os.path.getsize(path) == off
        assert [fs.load(s).data for s in range(1, 5)] == [f"msg-{i}".encode() * (1 + i % 5)
                                                         for i in range(4)]
        assert fs.store("n", None, b"new", 1) == 5
        fs.sync()
        fs.close()
        fs = open_file_store(tmp_path)                 # the repair itself is clean
        assert fs.recovery_report == [] and fs.load(5).data == b"new"
        fs.close()


def test_zeroed_tail_is_torn(tmp_path):
    path = _store_with_tail(tmp_path)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(bytes(100))
    fs = open_file_store(tmp_path)
    assert [r["kind"] for r in fs.recovery_report] == ["torn_tail"]
    assert fs.state().messages == 5 and os.path.getsize(path) == size
    fs.close()


@pytest.mark.parametrize("where", ["body", "header", "last_body"])
def test_bit_flip_is_reported_never_served(tmp_path, where):
    fs = open_file_store(tmp_path)
    populate(fs, 6)
    fs.sync()
    fs.close()
    path = os.path.join(tmp_path, blocks(tmp_path)[0])
    recs = record_offsets(path)
    victim = 5 if where == "last_body" else 2               # index: seq victim + 1
    off, size = recs[victim]
    flip_bit(path, off + (HEADER_SIZE + 3 if where != "header" else 9), 3)
    fs = open_file_store(tmp_path)
    rep = fs.recovery_report
    assert [r["kind"] for r in rep] == ["checksum_mismatch"]
    assert rep[0]["offset"] == off and rep[0]["first_seq"] == victim + 1
    bad = victim + 1
    with pytest.raises(CorruptMessage):
        fs.load(bad)
    st = fs.state(with_deleted=True)
    assert st.lost == [bad] and st.messages == 5 and st.last_seq == 6
    if bad != 6:
        assert st.deleted == [bad]
    for s in set(range(1, 7)) - {bad}:
        assert fs.load(s).seq == s
    assert fs.load_next(">", bad).seq == bad + 1 if bad < 6 else fs.load_next(">", bad) is None
    assert fs.store("new", None, b"fresh", 1) == 7              # never reuses a sequence
    fs.sync()
    fs.close()
    fs = open_file_store(tmp_path)
    assert fs.load(7).data == b"fresh" and fs.state().lost == [bad]
    assert fs.remove(bad) is False                               # forget the lost message
    fs.sync()
    fs.close()
    fs = open_file_store(tmp_path)
    assert fs.state().lost == []
    with pytest.raises(MessageNotFound):
        fs.load(bad)
    fs.close()


def test_bit_flip_after_open_is_detected_by_load(tmp_path):
    fs = open_file_store(tmp_path)
    populate(fs, 3)
    fs.sync()
    path = os.path.join(tmp_path, blocks(tmp_path)[0])
    off, _ = record_offsets(path)[1]
    flip_bit(path, off + HEADER_SIZE + 1)
    with pytest.raises(CorruptMessage):
        fs.load(2)
    assert fs.load(3).seq == 3
    fs.close()


def test_damaged_block_header_sets_block_aside(tmp_path):
    fs = open_file_store(tmp_path, block_bytes=200)
    populate(fs, 10)
    fs.sync()
    fs.close()
    names = blocks(tmp_path)
    flip_bit(os.path.join(tmp_path, names[0]), 2)
    fs = open_file_store(tmp_path, block_bytes=200)
    assert [r["kind"] for r in fs.recovery_report] == ["checksum_mismatch"]
    assert fs.state().last_seq == 10 and fs.state().messages < 10
    assert fs.store("a", None, b"", 1) == 11
    fs.close()


def test_block_holding_tombstones_of_earlier_blocks_is_kept(tmp_path):
    """A middle block whose messages are all gone is kept while it holds a tombstone of a
    message in an earlier block: deleting it would bring that message back on restart."""
    fs = open_file_store(tmp_path, block_bytes=300)
    populate(fs, 12)
    fs.sync()
    names = blocks(tmp_path)
    assert len(names) >= 3
    second = int(names[1][:20])
    fs.remove(1 + 1)                           # tombstone lands in the last block
    populate(fs, 12, start=12)                 # the tombstone's block is now in the middle
    holder = [n for n in blocks(tmp_path) if int(n[:20]) <= 12][-1]
    lo = int(holder[:20])
    for seq in range(lo, 13):
        fs.remove(seq)
    fs.sync()
    assert holder in blocks(tmp_path) and second <= lo
    before = snapshot(fs)
    fs.close()
    fs = open_file_store(tmp_path, block_bytes=300)
    assert snapshot(fs) == before
    with pytest.raises(MessageNotFound):
        fs.load(2)
    fs.close()
