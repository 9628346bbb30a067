"""A full or failing disk under a RAFT log: the failed write changes nothing, a failed fsync
poisons its file alone, and a failed log is rolled back to what is provably on disk.

Faults go through the ``fileio`` seam (``Faults``); ``CrashFS`` tells what each fsync made
durable, so "provably on disk" is checked by crashing the directory back to it.
"""

from __future__ import annotations

import errno
import os

import pytest
from raft_storage_helpers import CrashFS, Faults, entries, open_log, segments

from jetraft.raft.storage import meta
from jetraft.storage import fileio
from jetraft.storage import GroupCommit, StorageError, SyncFailed
from jetraft.storage.fileio import errno_name
from jetraft.raft.types import HardState


def seg_path(d) -> str:
    return os.path.join(d, segments(d)[-1])


def test_a_full_disk_refuses_the_append_and_changes_nothing(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync)
    log.append(entries(1, 5))
    sync.sync()
    size = os.path.getsize(seg_path(tmp_path))
    with fileio.inject(Faults().fail("pwrite", ".log", errno.ENOSPC)):
        with pytest.raises(StorageError) as info:
            log.append(entries(6, 3))
    assert errno_name(info.value) == "ENOSPC" and info.value.path == seg_path(tmp_path)
    assert log.last_index() == 5
    assert os.path.getsize(seg_path(tmp_path)) == size
    assert log.entries(1, 6) == entries(1, 5)
    with pytest.raises(StorageError, match="No space left"):     # failed for good
        log.append(entries(6, 1))
    with pytest.raises(StorageError):
        log.set_hard_state(HardState(2, "a", 5))
    log.close()                                 # a failed log closes without a sync
    again = open_log(tmp_path)
    assert again.last_index() == 5 and again.recovery_report == []


def test_a_short_write_is_cut_off_again(tmp_path):
    log = open_log(tmp_path)
    log.append(entries(1, 2))
    size = os.path.getsize(seg_path(tmp_path))
    faults = Faults().short(".log", 7).fail("pwrite", ".log", errno.ENOSPC)
    with fileio.inject(faults), pytest.raises(StorageError) as info:
        log.append(entries(3, 1, size=100))
    assert errno_name(info.value) == "ENOSPC"
    assert faults.count("pwrite") == 2                  # 7 bytes, then no room at all
    assert os.path.getsize(seg_path(tmp_path)) == size


def test_a_write_that_cannot_be_undone_is_cut_by_the_rollback(tmp_path):
    log = open_log(tmp_path)
    log.append(entries(1, 2))
    size = os.path.getsize(seg_path(tmp_path))
    faults = Faults().short(".log", 7).fail("pwrite", ".log", errno.EIO).fail("ftruncate", ".log")
    with fileio.inject(faults), pytest.raises(StorageError):
        log.append(entries(3, 1))
    assert os.path.getsize(seg_path(tmp_path)) == size + 7     # the 7 bytes are still there
    log.rollback_to_durable()
    assert os.path.getsize(seg_path(tmp_path)) == size
    again = open_log(tmp_path)
    assert again.last_index() == 2 and again.recovery_report == []


def test_a_full_disk_creating_a_segment_leaves_a_prefix_and_no_new_file(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    log.append(entries(1, 3, size=64))
    before = segments(tmp_path)
    with fileio.inject(Faults().fail("open", ".log", errno.ENOSPC)), pytest.raises(StorageError):
        log.append(entries(4, 6, size=64))
    # the entries that fitted the last segment are written (never acknowledged: the log
    # failed before any sync); the rest, and the segment that was to hold them, are not
    assert segments(tmp_path) == before
    last = log.last_index()
    assert 3 <= last < 9 and log.entries(1, last + 1) == (entries(1, 3, size=64)
                                                          + entries(4, last - 3, size=64))
    log.rollback_to_durable()
    assert open_log(tmp_path).last_index() == last


def test_a_failed_fsync_poisons_its_file_alone(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    sync = GroupCommit()
    a, b = open_log(tmp_path / "a", sync), open_log(tmp_path / "b", sync)
    sync.sync()
    a.append(entries(1, 3))
    b.append(entries(1, 3))
    faults = Faults().fail("fdatasync", str(tmp_path / "a" / ""))
    with fileio.inject(faults):
        with pytest.raises(SyncFailed) as info:
            sync.sync()
        failure, = info.value.failures
        assert failure.owner is a and failure.path == seg_path(tmp_path / "a")
        assert errno_name(failure.error) == "EIO"
        tried = faults.count("fdatasync", str(tmp_path / "a"))
        with pytest.raises(SyncFailed, match="earlier fsync failed"):   # reported again,
            sync.sync()
        assert faults.count("fdatasync", str(tmp_path / "a")) == tried   # never retried
        assert sync.sync_owner(b) == 0          # b's own view: nothing of b failed
    b.abandon()
    crash.crash(tmp_path / "b")
    assert open_log(tmp_path / "b").entries(1, 4) == entries(1, 3)     # b's pass was durable


def test_a_directory_fsync_failure_is_reported_to_its_owners(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync)
    log.append(entries(1, 1))                   # the segment is new: the directory is dirty
    with fileio.inject(Faults().fail("fsync", str(tmp_path))), pytest.raises(SyncFailed) as info:
        sync.sync()
    assert [f.owner for f in info.value.failures] == [log]


def test_rollback_to_durable_keeps_what_was_fsynced_and_nothing_else(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    sync = GroupCommit()
    log = open_log(tmp_path, sync, peers=("a", "b", "c"))
    log.append(entries(1, 10))
    log.set_hard_state(HardState(1, "a", 10))
    sync.sync()                                 # acknowledged from here on
    log.append(entries(11, 5, term=2))
    log.set_hard_state(HardState(2, "b", 10))
    with fileio.inject(Faults().fail("fdatasync", str(tmp_path))), pytest.raises(SyncFailed) as info:
        sync.sync()
    assert {f.path for f in info.value.failures} == {seg_path(tmp_path),
                                                      str(tmp_path / "hardstate")}
    log.fail(info.value)
    log.rollback_to_durable()
    again = open_log(tmp_path, GroupCommit())
    assert again.last_index() == 10 and again.entries(1, 11) == entries(1, 10)
    assert again.initial_state()[0] == HardState(1, "a", 10)
    again.abandon()
    crash.crash(tmp_path)                       # what the rollback left is on disk
    after_crash = open_log(tmp_path, GroupCommit())
    assert after_crash.last_index() == 10 and after_crash.initial_state()[0] == HardState(1, "a", 10)
    after_crash.append(entries(11, 2, term=3))  # and the log goes on from there
    assert after_crash.entries(11, 13) == entries(11, 2, term=3)


def test_a_rollback_that_fails_can_be_tried_again(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync)
    log.append(entries(1, 3))
    sync.sync()
    log.append(entries(4, 2))
    with fileio.inject(Faults().fail("fdatasync", str(tmp_path))):
        with pytest.raises(SyncFailed):
            sync.sync()
        with pytest.raises(StorageError):
            log.rollback_to_durable()       # the disk still fails: the log stays as it is
    log.rollback_to_durable()               # it works once the disk does
    assert open_log(tmp_path).entries(1, 4) == entries(1, 3)
    assert open_log(tmp_path).last_index() == 3


def test_write_atomic_that_fails_keeps_the_old_file(tmp_path):
    sync = GroupCommit()
    meta.write_atomic(str(tmp_path), "snapshot", b"old", sync)
    with fileio.inject(Faults().fail("pwrite", "snapshot.tmp", errno.ENOSPC)), \
            pytest.raises(StorageError) as info:
        meta.write_atomic(str(tmp_path), "snapshot", b"new" * 1000, sync)
    assert errno_name(info.value) == "ENOSPC"
    assert (tmp_path / "snapshot").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["snapshot"]
