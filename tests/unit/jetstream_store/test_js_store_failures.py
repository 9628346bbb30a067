"""FileStore on a full or failing disk: a failed write changes nothing and fails the store,
a failed fsync fails only the store it belongs to, and ``reopen_verified`` rolls a failed
store back to what is provably on disk, keeping every acknowledged message.

Faults go through the ``fileio`` seam (``Faults``: ENOSPC, EIO, short writes); CrashFS tells
what each fsync made durable. "Acknowledged" here means: stored before a sync that
returned, which is when the server sends the PubAck.
"""

from __future__ import annotations

import errno
import os

import pytest
from js_store_helpers import CrashFS, Faults, blocks, open_file_store, snapshot

from jetraft.jetstream.store import StorageError
from jetraft.storage import fileio
from jetraft.storage import SyncFailed
from jetraft.storage.fileio import errno_name
from jetraft.storage.group_commit import GroupCommit


def put(fs, n: int, start: int = 0, size: int = 50) -> list[int]:
    return [fs.store(f"s.{i}", None, f"payload {i} ".encode().ljust(size, b"."), 1_000 + i)
            for i in range(start, start + n)]


def payloads(fs) -> dict[int, bytes]:
    st = fs.state()
    out, seq = {}, st.first_seq
    while (m := fs.load_next(">", seq)) is not None:
        out[m.seq] = m.data
        seq = m.seq + 1
    return out


def sizes(path) -> dict[str, int]:
    return {name: os.path.getsize(os.path.join(path, name)) for name in blocks(path)}


def test_a_full_disk_refuses_the_message_and_changes_nothing(tmp_path):
    fs = open_file_store(tmp_path / "s")
    put(fs, 5)
    fs.sync()
    before, files = snapshot(fs), sizes(tmp_path / "s")
    faults = Faults().fail("pwrite", ".blk", errno.ENOSPC)
    with fileio.inject(faults), pytest.raises(StorageError) as info:
        fs.store("s.x", None, b"no room", 2_000)
    assert errno_name(info.value) == "ENOSPC"
    assert info.value.path == str(tmp_path / "s" / blocks(tmp_path / "s")[0])
    assert snapshot(fs) == before and sizes(tmp_path / "s") == files
    assert fs.failed is info.value
    # failed for good: every write is refused at once, without touching the disk
    writes = faults.count("pwrite")
    with fileio.inject(faults):
        for write in (lambda: fs.store("s.y", None, b"y", 2_001), lambda: fs.remove(1),
                      lambda: fs.purge(), lambda: fs.compact_to(3), lambda: fs.sync()):
            with pytest.raises(StorageError, match="No space left"):
                write()
    assert faults.count("pwrite") == writes
    assert snapshot(fs) == before                       # and reads go on
    fs.close()
    assert snapshot(open_file_store(tmp_path / "s")) == before


def test_a_short_write_then_enospc_is_cut_off_again(tmp_path):
    fs = open_file_store(tmp_path / "s")
    put(fs, 3)
    files = sizes(tmp_path / "s")
    with fileio.inject(Faults().short(".blk", 11).fail("pwrite", ".blk", errno.ENOSPC)), \
            pytest.raises(StorageError) as info:
        put(fs, 1, start=3)
    assert errno_name(info.value) == "ENOSPC"
    assert sizes(tmp_path / "s") == files and fs.state().last_seq == 3


def test_a_full_disk_starting_a_block_leaves_no_file(tmp_path):
    fs = open_file_store(tmp_path / "s", block_bytes=300)
    put(fs, 3)                      # 16 + 3 * 93 bytes: the next message starts a block
    fs.close()
    names = blocks(tmp_path / "s")
    for faults in (Faults().fail("open", ".blk", errno.ENOSPC),      # no inode left
                   Faults().fail("pwrite", ".blk", errno.ENOSPC)):   # no block left
        fs = open_file_store(tmp_path / "s", block_bytes=300)
        before = snapshot(fs)
        with fileio.inject(faults), pytest.raises(StorageError):
            put(fs, 1, start=3)
        assert blocks(tmp_path / "s") == names and snapshot(fs) == before
        fs.close()
    assert names == ["00000000000000000001.blk"]


def test_a_failed_fsync_fails_only_its_store(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    commit = GroupCommit()
    a, b = open_file_store(tmp_path / "a", commit), open_file_store(tmp_path / "b", commit)
    put(a, 3)
    put(b, 3)
    with fileio.inject(Faults().fail("fdatasync", str(tmp_path / "a" / ""))):
        with pytest.raises(SyncFailed) as info:
            commit.sync()
        assert {f.owner for f in info.value.failures} == {a}
        b.sync()                        # b's files were made durable: nothing of b failed
        with pytest.raises(SyncFailed):
            a.sync()
    assert a.failed is not None and b.failed is None
    with pytest.raises(StorageError):
        put(a, 1, start=3)
    b.close()
    crash.crash(tmp_path / "b")
    assert sorted(payloads(open_file_store(tmp_path / "b"))) == [1, 2, 3]


def test_reopen_verified_keeps_the_acknowledged_and_rolls_back_the_rest(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    commit = GroupCommit()
    fs = open_file_store(tmp_path / "s", commit)
    put(fs, 10)
    commit.sync()                                       # 1..10 acknowledged
    acked = payloads(fs)
    put(fs, 3, start=10)                                # 11..13 written, never acknowledged
    with fileio.inject(Faults().fail("fdatasync", ".blk")), pytest.raises(SyncFailed) as info:
        commit.sync()
    fs.fail(info.value)
    fresh = fs.reopen_verified()
    fs.close()
    assert fresh.failed is None and fresh.recovered_last == 10
    assert payloads(fresh) == acked                     # byte for byte
    st = fresh.state()
    assert (st.messages, st.first_seq, st.last_seq) == (10, 1, 13)
    assert fresh.store("s.next", None, b"after", 5_000) == 14     # no sequence used twice
    fresh.sync()
    fresh.close()
    crash.crash(tmp_path / "s")                         # and that is what is on disk
    again = open_file_store(tmp_path / "s")
    assert {k: v for k, v in payloads(again).items() if k <= 13} == acked
    assert again.state().last_seq == 14 and again.load(14).data == b"after"


def test_reopen_verified_fails_while_the_disk_does_and_is_retried(tmp_path):
    commit = GroupCommit()
    fs = open_file_store(tmp_path / "s", commit)
    put(fs, 4)
    commit.sync()
    put(fs, 2, start=4)
    faults = Faults().fail("fdatasync", ".blk")
    with fileio.inject(faults):
        with pytest.raises(SyncFailed) as info:
            commit.sync()
        fs.fail(info.value)
        with pytest.raises(StorageError):
            fs.reopen_verified()
    fresh = fs.reopen_verified()
    assert sorted(payloads(fresh)) == [1, 2, 3, 4] and fresh.state().last_seq == 6


def test_reopen_verified_after_a_write_failure_keeps_everything_written(tmp_path):
    commit = GroupCommit()
    fs = open_file_store(tmp_path / "s", commit)
    put(fs, 4)                  # written, not yet synced: a sync may still make them durable
    with fileio.inject(Faults().fail("pwrite", ".blk", errno.ENOSPC)), pytest.raises(StorageError):
        put(fs, 1, start=4)
    fresh = fs.reopen_verified()
    assert sorted(payloads(fresh)) == [1, 2, 3, 4] and fresh.recovered_last == 4


def test_skip_to_survives_a_restart(tmp_path):
    fs = open_file_store(tmp_path / "s")
    put(fs, 3)
    fs.skip_to(10)
    fs.sync()
    fs.close()
    again = open_file_store(tmp_path / "s")
    st = again.state()
    assert (st.messages, st.last_seq, st.num_deleted) == (3, 10, 7)
    assert put(again, 1, start=3) == [11]
