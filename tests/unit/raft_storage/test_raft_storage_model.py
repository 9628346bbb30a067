"""Property: random appends, truncations, hard states, snapshots, compactions, reopens and
crashes leave a GroupLog showing exactly what MemoryStorage (the model) shows."""

from __future__ import annotations

import copy
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raft_storage_helpers import CrashFS, assert_same, die, open_log, peers_at, reopened_model

from jetraft.raft.memory import MemoryStorage
from jetraft.storage import GroupCommit
from jetraft.raft.types import (
    ConfigChange,
    ConfigChangeType,
    Entry,
    EntryType,
    HardState,
    Snapshot,
)

OPS = st.lists(st.tuples(
    st.sampled_from(["append", "append", "append", "hard_state", "create_snapshot",
                     "compact", "apply_snapshot", "reopen", "sync", "crash"]),
    st.integers(0, 1 << 16), st.integers(0, 1 << 16)), max_size=40)


def make_entries(model: MemoryStorage, a: int, b: int) -> list[Entry]:
    # never below the snapshot: entries up to it are committed and never truncated
    lo, last = max(model.first_index(), model.snapshot().index + 1), model.last_index()
    first = lo + a % (last + 2 - lo)                       # in [lo, last + 1]
    term = model.term(first - 1) + b % 3
    out = []
    for i in range(first, first + 1 + b % 9):
        if (a + i) % 7 == 0:
            change = ConfigChange(ConfigChangeType(1 + i % 2), f"p{i % 4}")
            out.append(Entry(term, i, EntryType.CONFIG_CHANGE, change.encode()))
        else:
            out.append(Entry(term, i, data=bytes([i % 251]) * ((a * i) % 40)))
    return out


@pytest.fixture(scope="module")
def crashfs():
    mp = pytest.MonkeyPatch()
    yield CrashFS(mp)
    mp.undo()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, segment_bytes=st.sampled_from([200, 600, 1 << 20]))
def test_log_matches_model(crashfs, ops, segment_bytes):
    with tempfile.TemporaryDirectory() as d:
        sync = GroupCommit()
        kw = dict(segment_bytes=segment_bytes, sync_commit=True)
        log = open_log(d, sync, peers=("p0", "p1"), **kw)
        model = MemoryStorage(("p0", "p1"))
        synced = copy.deepcopy(model)

        def durable():
            nonlocal synced
            sync.sync()
            synced = copy.deepcopy(model)

        for op, a, b in ops:
            if op == "append":
                ents = make_entries(model, a, b)
                repairing = bool(log.commit_watermark())
                log.append(ents)
                model.append(ents)
                if repairing and not log.commit_watermark():
                    # the append repaired a clamped commit: GroupLog made it durable before
                    # dropping the watermark (GroupLog._drop_watermark_if_repaired)
                    synced = copy.deepcopy(model)
            elif op == "hard_state":
                hs = HardState(a % 5, f"p{b % 3}" if b % 4 else None, a % (model.last_index() + 3))
                log.set_hard_state(hs)
                model.set_hard_state(hs)
            elif op == "create_snapshot" and model.last_index() > model.snapshot().index:
                durable()
                s = model.snapshot().index
                index = s + 1 + a % (model.last_index() - s)
                peers = peers_at(model, index)
                assert log.create_snapshot(index, b"s%d" % a, peers) == \
                    model.create_snapshot(index, b"s%d" % a, peers)
                durable()
            elif op == "compact":
                durable()
                index = a % (model.snapshot().index + 1)
                log.compact(index)
                model.compact(index)
                durable()
            elif op == "apply_snapshot":
                durable()
                index = model.snapshot().index + 1 + a % (model.last_index() + 4)
                try:
                    term = model.term(index) + b % 2
                except Exception:
                    term = 1 + b % 5
                snap = Snapshot(index, term, ("p1", "p2"), b"x%d" % b)
                log.apply_snapshot(snap)
                model.apply_snapshot(snap)
                durable()
            elif op == "reopen":
                log.close()
                log = open_log(d, sync, **kw)
                model = reopened_model(model)
                synced = copy.deepcopy(model)
                assert log.recovery_report == [] or \
                    {r["kind"] for r in log.recovery_report} == {"commit_clamped"}
            elif op == "sync":
                durable()
            elif op == "crash":
                die(log)
                crashfs.crash(d)
                sync = GroupCommit()
                log = open_log(d, sync, **kw)
                model = reopened_model(synced)
                synced = copy.deepcopy(model)
                kinds = {r["kind"] for r in log.recovery_report}
                assert kinds <= {"commit_clamped", "stale_log_discarded"}
            assert_same(log, model)
        log.close()
