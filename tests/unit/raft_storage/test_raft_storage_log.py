"""GroupLog: the Storage protocol, the write side, restart, compaction, LogDirectory."""

from __future__ import annotations

import os

import pytest
from raft_storage_helpers import entries, open_log, segments

from jetraft.raft.storage import LogDirectory
from jetraft.storage import GroupCommit, StorageError
from jetraft.raft.storage.directory import group_dir_name
from jetraft.raft.types import (
    CompactedError,
    ConfigChange,
    ConfigChangeType,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    UnavailableError,
)


def config(index: int, term: int, kind: ConfigChangeType, peer: str) -> Entry:
    return Entry(term, index, EntryType.CONFIG_CHANGE, ConfigChange(kind, peer).encode())


def test_empty_log(tmp_path):
    log = open_log(tmp_path, peers=("a", "b", "c"))
    assert (log.first_index(), log.last_index(), log.term(0)) == (1, 0, 0)
    assert log.snapshot() == Snapshot(0, 0, ("a", "b", "c"))
    assert log.initial_state() == (HardState(), ("a", "b", "c"))
    assert log.entries(1, 1) == []
    with pytest.raises(UnavailableError):
        log.term(1)
    with pytest.raises(UnavailableError):
        log.entries(1, 2)
    with pytest.raises(CompactedError):
        log.entries(0, 1)


def test_append_read_and_max_bytes(tmp_path):
    log = open_log(tmp_path)
    ents = entries(1, 10, size=100)
    log.append(ents)
    assert log.last_index() == 10
    assert log.entries(1, 11) == ents
    assert log.entries(3, 6) == ents[2:5]
    assert log.entries(3, 11, max_bytes=250) == ents[2:4]
    assert log.entries(3, 11, max_bytes=0) == ents[2:3]          # at least one
    assert [log.term(i) for i in range(11)] == [0] + [1] * 10
    with pytest.raises(UnavailableError):
        log.entries(5, 12)
    with pytest.raises(ValueError):
        log.append(entries(12, 1))                               # gap
    with pytest.raises(ValueError):
        log.append([Entry(1, 11), Entry(1, 13)])                 # not consecutive


def test_conflicting_append_truncates_and_survives_restart(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync, segment_bytes=400)
    log.append(entries(1, 20, term=1))
    log.append(entries(8, 3, term=2))                            # truncates 8..20
    assert log.last_index() == 10
    assert [log.term(i) for i in (7, 8, 10)] == [1, 2, 2]
    log.close()
    log = open_log(tmp_path, sync, segment_bytes=400)
    assert log.recovery_report == []
    assert log.last_index() == 10                                # nothing resurrected
    assert log.entries(1, 11) == entries(1, 7, term=1) + entries(8, 3, term=2)
    log.append(entries(11, 5, term=2))
    assert log.entries(11, 16) == entries(11, 5, term=2)


def test_restart_restores_hard_state_snapshot_and_peers(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync, peers=("a", "b", "c"))
    log.append(entries(1, 5))
    log.append([config(6, 1, ConfigChangeType.ADD_PEER, "d")])
    log.append([config(7, 1, ConfigChangeType.REMOVE_PEER, "a")] + entries(8, 3))
    log.set_hard_state(HardState(3, "b", 9))
    assert log.initial_state() == (HardState(3, "b", 9), ("b", "c", "d"))
    snap = log.create_snapshot(6, b"state", ("a", "b", "c", "d"))
    assert snap == Snapshot(6, 1, ("a", "b", "c", "d"), b"state")
    log.close()
    log = open_log(tmp_path, sync, peers=("ignored",))
    assert log.snapshot() == snap
    assert log.first_index() == 7
    assert log.initial_state() == (HardState(3, "b", 9), ("b", "c", "d"))
    assert log.entries(7, 11)[0].type == EntryType.CONFIG_CHANGE
    log.append([Entry(4, 7)])                                    # truncating undoes "remove a"
    assert log.initial_state()[1] == ("a", "b", "c", "d")


def test_create_snapshot_compact_and_errors(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    log.append(entries(1, 40, size=20))
    with pytest.raises(ValueError):
        log.compact(5)                                           # beyond the snapshot
    log.create_snapshot(25, b"s", ())
    assert log.first_index() == 1                                # as MemoryStorage
    with pytest.raises(ValueError):
        log.create_snapshot(25, b"s", ())
    with pytest.raises(UnavailableError):
        log.create_snapshot(41, b"s", ())
    log.compact(25)
    assert log.first_index() == 26 and log.term(25) == 1
    with pytest.raises(CompactedError):
        log.term(24)
    with pytest.raises(CompactedError):
        log.entries(25, 26)
    assert log.entries(26, 41) == entries(26, 15, size=20)


def test_compaction_deletes_whole_segments_only(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync, segment_bytes=256)
    log.append(entries(1, 60, size=20))
    before = {n: os.path.getsize(tmp_path / n) for n in segments(tmp_path)}
    assert len(before) > 5
    log.create_snapshot(30, b"s", ())
    log.compact(30)
    after = {n: os.path.getsize(tmp_path / n) for n in segments(tmp_path)}
    assert after and set(after) < set(before)
    assert all(before[n] == size for n, size in after.items())   # survivors untouched
    firsts = [int(n[:20]) for n in after]
    assert firsts[0] <= 31 and all(int(n[:20]) <= 30 for n in set(before) - set(after))
    assert log.entries(31, 61) == entries(31, 30, size=20)
    log.close()
    log = open_log(tmp_path, sync, segment_bytes=256)
    assert log.recovery_report == [] and log.entries(31, 61) == entries(31, 30, size=20)
    log.create_snapshot(60, b"s", ())
    log.compact(60)
    assert segments(tmp_path) == []                              # even the last one
    log.append(entries(61, 2))
    log.close()
    log = open_log(tmp_path, sync)
    assert (log.first_index(), log.last_index()) == (61, 62)


def test_apply_snapshot_keeps_matching_log_discards_other(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync, segment_bytes=300)
    log.append(entries(1, 30, size=20))
    log.apply_snapshot(Snapshot(10, 1, ("x",), b"d"))            # matching: keep 11..30
    assert (log.first_index(), log.last_index()) == (11, 30)
    assert log.entries(11, 31) == entries(11, 20, size=20)
    log.apply_snapshot(Snapshot(5, 1, ("x",)))                   # older: ignored
    assert log.snapshot().index == 10
    log.apply_snapshot(Snapshot(20, 7, ("y",), b"e"))            # term differs: discard
    assert (log.first_index(), log.last_index(), log.term(20)) == (21, 20, 7)
    assert segments(tmp_path) == []
    log.append(entries(21, 3, term=7))
    log.close()
    log = open_log(tmp_path, sync)
    assert log.snapshot() == Snapshot(20, 7, ("y",), b"e")
    assert log.initial_state()[1] == ("y",)
    assert log.entries(21, 24) == entries(21, 3, term=7)


def test_hot_tail_served_from_cache_cold_from_disk(tmp_path, monkeypatch):
    log = open_log(tmp_path, cache_bytes=2000)
    ents = entries(1, 100, size=50)
    for k in range(0, 100, 10):
        log.append(ents[k:k + 10])
    reads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a) or real(*a))
    assert log.entries(95, 101) == ents[94:]
    assert reads == []
    assert log.entries(1, 101) == ents
    assert len(reads) == 1                                       # one read for the cold run


def test_unknown_format_version_is_an_error(tmp_path):
    log = open_log(tmp_path)
    log.append(entries(1, 2))
    log.close()
    seg = tmp_path / segments(tmp_path)[0]
    raw = bytearray(seg.read_bytes())
    raw[6] = 9                                                   # version, crc recomputed
    import struct
    import zlib
    struct.pack_into("<I", raw, 20, zlib.crc32(bytes(raw[:20])))
    seg.write_bytes(bytes(raw))
    with pytest.raises(StorageError, match="version"):
        open_log(tmp_path)


def test_closed_log_refuses_writes(tmp_path):
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(StorageError):
        log.append(entries(1, 1))


def test_log_directory_names_and_reopen(tmp_path):
    sync = GroupCommit()
    d = LogDirectory(tmp_path, sync)
    names = ["$G", "stream/ORDERS", "..", "", "ünï cödé", "x" * 300, "S_a-b.c"]
    for k, name in enumerate(names):
        log = d.open(name, peers=("a",))
        assert d.open(name) is log
        log.append(entries(1, k + 1))
    dirs = os.listdir(tmp_path)
    assert len(set(dirs)) == len(names)
    assert all("/" not in n and n not in (".", "..") and len(n) <= 200 for n in dirs)
    assert group_dir_name("a/b") != group_dir_name("a%2Fb")
    d.close()
    d = LogDirectory(tmp_path, sync)
    assert d.groups() == sorted(names)
    for k, name in enumerate(names):
        assert d.open(name).last_index() == k + 1
