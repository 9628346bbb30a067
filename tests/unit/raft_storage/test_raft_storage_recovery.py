"""Recovery on open: torn tails, bit flips, corrupt ranges and their repair (design.md
"Durability"; Jepsen NATS 2.12.1, nats-server #7549 bit flips lose acked writes)."""

from __future__ import annotations

import os

import pytest
from raft_storage_helpers import entries, open_log, segments

from jetraft.storage import GroupCommit, StorageError
from jetraft.raft.storage.wal import HEADER_SIZE, SEGMENT_HEADER_SIZE
from jetraft.raft.types import CorruptRangeError, HardState, Snapshot, UnavailableError

SIZE = 40
RECORD = HEADER_SIZE + SIZE


def record_offset(k: int) -> int:
    """Offset of the k-th record (0-based) of a segment of SIZE-byte entries."""
    return SEGMENT_HEADER_SIZE + k * RECORD


def write_log(path, n: int = 10, **kw):
    log = open_log(path, **kw)
    log.append(entries(1, n, size=SIZE))
    log.set_hard_state(HardState(2, "a", n))
    log.close()
    return path / segments(path)[-1]


def flip(path, offset: int, bit: int = 0) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 1 << bit
    path.write_bytes(bytes(raw))


def test_torn_tail_at_every_byte_offset(tmp_path):
    seg = write_log(tmp_path / "orig", 5)
    raw = seg.read_bytes()
    start = record_offset(4)
    assert len(raw) == start + RECORD
    for cut in range(start, len(raw)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        for name in os.listdir(seg.parent):
            (d / name).write_bytes((seg.parent / name).read_bytes())
        (d / seg.name).write_bytes(raw[:cut])
        log = open_log(d)
        if cut == start:
            assert log.recovery_report[0]["kind"] == "commit_clamped"
        else:
            [torn, clamp] = log.recovery_report
            assert torn == {"file": str(d / seg.name), "offset": start, "kind": "torn_tail",
                            "first_index": 5, "detail": torn["detail"]}
            assert clamp["kind"] == "commit_clamped"
        assert log.last_index() == 4
        assert log.entries(1, 5) == entries(1, 4, size=SIZE)
        assert log.initial_state()[0] == HardState(2, "a", 4)
        assert os.path.getsize(d / seg.name) == start               # truncated on open
        log.append(entries(5, 2, term=3, size=SIZE))
        log.close()
        log = open_log(d)
        assert log.recovery_report == []
        assert log.entries(5, 7) == entries(5, 2, term=3, size=SIZE)
        log.close()


def test_zeroed_tail_is_torn(tmp_path):
    seg = write_log(tmp_path, 5)
    raw = seg.read_bytes()
    seg.write_bytes(raw[:record_offset(4)] + bytes(RECORD + 100))
    log = open_log(tmp_path)
    assert log.recovery_report[0]["kind"] == "torn_tail"
    assert log.last_index() == 4


@pytest.mark.parametrize("where", ["body", "header", "length", "crc"])
def test_bit_flip_before_the_tail_is_a_corrupt_range_and_is_repaired(tmp_path, where):
    seg = write_log(tmp_path, 10)
    off = record_offset(5) + {"body": HEADER_SIZE + 3, "header": 10, "length": 5,
                              "crc": 29}[where]
    flip(seg, off, bit=3)
    log = open_log(tmp_path)
    [bad, clamp] = log.recovery_report
    assert bad["kind"] == "checksum_mismatch" and bad["first_index"] == 6
    assert bad["offset"] == record_offset(5)
    assert clamp["kind"] == "commit_clamped"
    assert log.last_index() == 5
    assert log.initial_state()[0].commit == 5                      # re-fetched, not applied
    assert log.entries(1, 6) == entries(1, 5, size=SIZE)
    with pytest.raises(CorruptRangeError) as err:
        log.entries(4, 8)
    assert err.value.lo == 6 and err.value.hi >= 7
    with pytest.raises(CorruptRangeError):
        log.term(6)
    if where != "length":                                           # its end is unknown then
        assert err.value.hi == 11
    with pytest.raises(UnavailableError):
        log.term(err.value.hi)
    # the leader re-sends 6..10 (as normal catch-up): the corrupt bytes are replaced
    log.append(entries(6, 5, size=SIZE))
    assert log.entries(1, 11) == entries(1, 10, size=SIZE)
    log.close()
    log = open_log(tmp_path)
    assert log.recovery_report == []
    assert log.entries(1, 11) == entries(1, 10, size=SIZE)


def test_corruption_in_an_earlier_segment_hides_later_segments(tmp_path):
    write_log(tmp_path, 30, segment_bytes=4 * RECORD + SEGMENT_HEADER_SIZE)
    segs = segments(tmp_path)
    assert len(segs) >= 4
    flip(tmp_path / segs[1], record_offset(1) + HEADER_SIZE)
    log = open_log(tmp_path, segment_bytes=4 * RECORD + SEGMENT_HEADER_SIZE)
    first_bad = int(segs[1][:20]) + 1
    assert log.recovery_report[0]["first_index"] == first_bad
    assert log.last_index() == first_bad - 1
    with pytest.raises(CorruptRangeError) as err:
        log.entries(first_bad, first_bad + 1)
    assert err.value.hi == 31
    log.compact(0)                                                   # never drops it
    # the leader re-sends from an earlier index (a conflict further back)
    log.append(entries(first_bad - 1, 5, term=2, size=SIZE))
    assert log.last_index() == first_bad + 3
    log.set_hard_state(HardState(2, "a", first_bad + 3))
    log.close()
    log = open_log(tmp_path)
    assert log.recovery_report == []
    assert log.entries(first_bad - 1, first_bad + 4) == entries(first_bad - 1, 5, term=2,
                                                                size=SIZE)


def test_missing_middle_segment_is_a_gap(tmp_path):
    write_log(tmp_path, 30, segment_bytes=4 * RECORD + SEGMENT_HEADER_SIZE)
    segs = segments(tmp_path)
    os.unlink(tmp_path / segs[2])
    log = open_log(tmp_path)
    assert log.recovery_report[0]["kind"] == "checksum_mismatch"
    assert log.last_index() == int(segs[2][:20]) - 1


def test_stale_tail_after_unsynced_truncation_is_not_served(tmp_path):
    # The OS kept the new records but not the new file length: the old records after them
    # have the right indexes but chain from a different crc.
    seg = write_log(tmp_path, 10)
    old = seg.read_bytes()
    log = open_log(tmp_path)
    log.append(entries(4, 2, term=5, size=SIZE))
    log.close()
    new = seg.read_bytes()
    seg.write_bytes(new + old[len(new):])
    log = open_log(tmp_path)
    assert log.last_index() == 5
    assert log.recovery_report[0]["first_index"] == 6
    assert [log.term(i) for i in range(1, 6)] == [1, 1, 1, 5, 5]


def test_bit_flip_after_open_is_detected_on_read(tmp_path):
    seg = write_log(tmp_path, 10)
    log = open_log(tmp_path, cache_bytes=0)
    flip(seg, record_offset(2) + HEADER_SIZE + 1)
    with pytest.raises(CorruptRangeError):
        log.entries(1, 11)
    assert log.recovery_report[-1]["first_index"] == 3


def test_corrupt_snapshot_file_is_detected_and_repaired_by_install(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync, peers=("a", "b"))
    log.append(entries(1, 10))
    log.create_snapshot(5, b"state", ("a", "b"))
    log.set_hard_state(HardState(3, "a", 10))
    log.close()
    flip(tmp_path / "snapshot", 30)
    log = open_log(tmp_path, sync, peers=("a", "b"))
    assert log.recovery_report[0]["kind"] == "snapshot_checksum_mismatch"
    assert log.last_index() == 0
    assert log.initial_state() == (HardState(3, "a", 0), ("a", "b"))
    with pytest.raises(CorruptRangeError):
        log.entries(1, 2)
    log.apply_snapshot(Snapshot(8, 1, ("a", "b"), b"from leader"))
    log.append(entries(9, 4))
    log.close()
    log = open_log(tmp_path, sync)
    assert log.recovery_report == []
    assert log.snapshot().data == b"from leader"
    assert log.entries(9, 13) == entries(9, 4)


def test_hard_state_slots(tmp_path):
    sync = GroupCommit()
    log = open_log(tmp_path, sync)
    log.set_hard_state(HardState(1, "a", 0))
    sync.sync()
    log.set_hard_state(HardState(2, "b", 0))                # the other slot: 1 is durable
    log.set_hard_state(HardState(2, "b", 1))                # same slot again, not yet synced
    log.close()
    hs = tmp_path / "hardstate"
    raw = bytearray(hs.read_bytes())
    raw[4096 + 12] ^= 1                     # damage the newest slot: the older one is used
    hs.write_bytes(bytes(raw))
    assert open_log(tmp_path).initial_state()[0] == HardState(1, "a", 0)
    raw[12] ^= 1                            # both damaged: refuse (term and vote matter)
    hs.write_bytes(bytes(raw))
    with pytest.raises(StorageError, match="hard state"):
        open_log(tmp_path)
    hs.write_bytes(bytes(len(raw)))         # creation torn (zeros): nothing was durable
    log = open_log(tmp_path)
    assert log.initial_state()[0] == HardState()
    assert log.recovery_report[0]["kind"] == "torn_tail"


def test_torn_new_segment_header_is_dropped(tmp_path):
    write_log(tmp_path, 3)
    (tmp_path / f"{4:020d}.log").write_bytes(b"JRWAL")
    log = open_log(tmp_path)
    assert log.recovery_report[0]["kind"] == "torn_tail"
    assert log.last_index() == 3 and segments(tmp_path) == [f"{1:020d}.log"]
