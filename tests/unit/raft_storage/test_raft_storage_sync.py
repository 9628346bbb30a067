"""Group commit (one fsync per dirty file per batch) and crashes that lose unsynced data."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from raft_storage_helpers import CrashFS, die, entries, open_log

from jetraft.raft.storage import LogDirectory
from jetraft.storage import GroupCommit, StorageError
from jetraft.raft.types import HardState


def test_one_sync_covers_every_group_with_one_fsync_per_file(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    sync = GroupCommit()
    d = LogDirectory(tmp_path, sync)
    logs = [d.open(f"g{k}", peers=("a",)) for k in range(20)]
    crash.calls.clear()
    for round_ in range(3):
        for k, log in enumerate(logs):
            first = log.last_index() + 1
            for n in range(4):                              # several appends per group
                log.append(entries(first + n, 8))
            log.set_hard_state(HardState(round_ + 1, "a", first))
        done = sync.sync()
        assert done == len(crash.calls)
        per_file = Counter(crash.calls)
        assert max(per_file.values()) == 1
        # each group: its segment and its hard state; directories only after creates
        assert len(per_file) == 2 * len(logs) + (len(logs) if round_ == 0 else 0)
        crash.calls.clear()
    assert sync.sync() == 0
    assert sync.fsyncs >= 3 * 2 * len(logs)


def test_commit_only_change_is_not_forced(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    sync = GroupCommit()
    log = open_log(tmp_path, sync)
    log.append(entries(1, 5))
    log.set_hard_state(HardState(1, "a", 0))
    sync.sync()
    log.set_hard_state(HardState(1, "a", 5))
    assert sync.sync() == 0                                  # etcd MustSync: commit alone
    log.set_hard_state(HardState(2, None, 5))
    assert sync.sync() == 1
    crash.calls.clear()
    forced_sync = GroupCommit()
    forced = open_log(tmp_path / "forced", forced_sync, sync_commit=True)
    forced.set_hard_state(HardState(0, None, 3))
    assert forced_sync.sync() >= 1


def test_failed_fsync_is_fatal(tmp_path, monkeypatch):
    sync = GroupCommit()
    log = open_log(tmp_path, sync)
    log.append(entries(1, 1))

    def eio(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", eio)
    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(StorageError):
        sync.sync()
    monkeypatch.undo()
    with pytest.raises(StorageError, match="earlier fsync failed"):
        sync.sync()


def test_crash_loses_only_unsynced_writes(tmp_path, monkeypatch):
    crash = CrashFS(monkeypatch)
    sync = GroupCommit()
    log = open_log(tmp_path, sync, segment_bytes=512, peers=("a", "b"))
    log.append(entries(1, 30))
    log.set_hard_state(HardState(1, "a", 10))
    sync.sync()
    log.append(entries(31, 30))                              # never synced
    log.append(entries(20, 3, term=2))                       # a truncation, never synced
    log.set_hard_state(HardState(2, "b", 12))
    die(log)                                                 # the process dies
    crash.crash(tmp_path)
    log = open_log(tmp_path, GroupCommit(), segment_bytes=512)
    assert [r["kind"] for r in log.recovery_report] == []
    assert log.last_index() == 30
    assert log.entries(1, 31) == entries(1, 30)              # the synced state, exactly
    assert log.initial_state() == (HardState(1, "a", 10), ("a", "b"))


@pytest.mark.parametrize("keep", [0, 1, 7, 32, 33, 100, 1000])
def test_crash_with_part_of_the_unsynced_tail_written(tmp_path, monkeypatch, keep):
    crash = CrashFS(monkeypatch)
    sync = GroupCommit()
    log = open_log(tmp_path, sync)
    log.append(entries(1, 10))
    sync.sync()
    log.append(entries(11, 10))
    seg = tmp_path / f"{1:020d}.log"
    full = seg.read_bytes()
    die(log)
    crash.crash(tmp_path)
    synced = seg.read_bytes()
    seg.write_bytes(full[:len(synced) + keep])              # the OS wrote some of it
    log = open_log(tmp_path)
    last = log.last_index()
    assert 10 <= last <= 20
    assert log.entries(1, last + 1) == entries(1, last)      # a prefix, never a bad record
    assert all(r["kind"] == "torn_tail" for r in log.recovery_report)
