"""The commit watermark a corrupt log leaves behind survives reopening until repaired."""

from __future__ import annotations

from pathlib import Path

from jetraft.raft.storage import GroupLog
from jetraft.storage import GroupCommit
from jetraft.raft.types import Entry, HardState


def make_log(path: Path, sync: GroupCommit | None = None) -> GroupLog:
    return GroupLog(path, sync=sync or GroupCommit(), peers=("a", "b", "c"))


def test_watermark_survives_reopen_and_clears_after_repair(tmp_path):
    sync = GroupCommit()
    log = make_log(tmp_path, sync)
    entries = [Entry(1, i, data=b"e%03d" % i + b"x" * 120) for i in range(1, 41)]
    log.append(entries)
    log.set_hard_state(HardState(1, "a", 40))
    sync.sync()
    log.close()
    segment = next(tmp_path.glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x55
    segment.write_bytes(bytes(data))

    first = make_log(tmp_path)
    lost_from = first.last_index() + 1
    assert lost_from <= 40 and first.commit_watermark() == 40
    assert first.initial_state()[0].commit == first.last_index()  # clamped
    first.close()

    second = make_log(tmp_path)  # the clamped commit was written back: only the mark remembers
    assert second.commit_watermark() == 40
    second.append(entries[lost_from - 1:])  # the leader re-sends what was lost
    assert second.commit_watermark() == 0
    second.close()

    third = make_log(tmp_path)
    assert third.commit_watermark() == 0 and third.last_index() == 40
    assert third.recovery_report == []
    third.close()
