"""Property: random stores, removes, purges, compactions, syncs, reopens and crashes leave
a FileStore showing exactly what a MemoryStore (the model) shows; a crash takes the model
back to its state at the last sync."""

from __future__ import annotations

import copy
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from js_store_helpers import CrashFS, open_file_store, snapshot

from jetraft.jetstream.store import MemoryStore, msg_size
from jetraft.storage.group_commit import GroupCommit

SUBJECTS = ["a", "a.b", "a.c", "b.b", "c"]
FILTERS = ["a", "a.*", "*.b", ">", "c", "zz"]

OPS = st.lists(st.tuples(
    st.sampled_from(["store", "store", "store", "store", "store_batch", "remove", "purge",
                     "purge_filter", "purge_keep", "purge_seq", "compact", "sync", "sync",
                     "reopen", "crash"]),
    st.integers(0, 1 << 16), st.integers(0, 1 << 16)), max_size=40)


@pytest.fixture(scope="module")
def crashfs():
    mp = pytest.MonkeyPatch()
    yield CrashFS(mp)
    mp.undo()


def apply(store, op: str, a: int, b: int, ts: int):
    last = store.state().last_seq
    if op == "store":
        return store.store(SUBJECTS[a % 5], b"NATS/1.0\r\n\r\n" if b % 3 == 0 else None,
                           bytes([a % 251]) * (b % 70), ts)
    if op == "store_batch":
        return [store.store(SUBJECTS[(a + i) % 5], None, b"x" * (i * 7 % 50), ts + i)
                for i in range(b % 12)]
    if op == "remove":
        return store.remove(a % (last + 2))
    if op == "purge":
        return store.purge()
    if op == "purge_filter":
        return store.purge(FILTERS[a % 6])
    if op == "purge_keep":
        return store.purge(FILTERS[a % 6] if b % 2 else None, keep=b % 5)
    if op == "purge_seq":
        return store.purge(FILTERS[a % 6] if b % 2 else None, seq=a % (last + 2))
    if op == "compact":
        return store.compact_to(a % (last + 4))
    raise AssertionError(op)


class FileSizedModel(MemoryStore):
    """The model counts bytes as the file store does (the stores' accounting differs)."""

    msg_size = staticmethod(msg_size)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, block_bytes=st.sampled_from([150, 600, 1 << 20]))
def test_file_store_matches_model(crashfs, ops, block_bytes):
    with tempfile.TemporaryDirectory() as root:
        d = f"{root}/stream"
        fs = open_file_store(d, GroupCommit(), block_bytes=block_bytes)
        model = FileSizedModel()
        synced = copy.deepcopy(model)
        ts = 1_000
        for op, a, b in ops:
            ts += 100
            if op == "sync":
                fs.sync()
                synced = copy.deepcopy(model)
            elif op == "reopen":            # a clean restart: what the OS holds survives
                fs.sync()
                synced = copy.deepcopy(model)
                fs.close()
                fs = open_file_store(d, GroupCommit(), block_bytes=block_bytes)
                assert fs.recovery_report == []
            elif op == "crash":             # power loss: only what was fsynced survives
                fs.close()
                crashfs.crash(d)
                fs = open_file_store(d, GroupCommit(), block_bytes=block_bytes)
                assert fs.recovery_report == []
                model = copy.deepcopy(synced)
            else:
                assert apply(fs, op, a, b, ts) == apply(model, op, a, b, ts), op
            assert snapshot(fs) == snapshot(model), op
        fs.close()
