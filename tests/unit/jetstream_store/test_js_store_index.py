"""The store's index holds no Python object per message, and a hostile sequence jump costs
nothing: what an operator sees as memory use and garbage-collection pauses."""

from __future__ import annotations

import gc
import os
import shutil
import tracemalloc

import pytest
from js_store_helpers import blocks, flip_bit, make_store, open_file_store, record_offsets, snapshot

from jetraft.jetstream import store_format as fmt
from jetraft.jetstream.store import CorruptMessage
from jetraft.jetstream.store_format import HEADER_SIZE

N = 20_000


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    s = make_store(request.param, tmp_path)
    yield s
    s.close()


def test_reopened_file_store_tracks_no_object_per_message(tmp_path):
    s = open_file_store(tmp_path / "stream")
    for i in range(N):
        s.store(f"orders.{i % 50}", None, b"x" * 32, 1_000 + i)
    s.sync()
    s.close()
    gc.collect()
    before = len(gc.get_objects())
    again = open_file_store(tmp_path / "stream")
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert again.state().messages == N
    # per block and per subject only (50 subjects), not per message
    assert grown < N // 10, grown
    again.close()


def test_compact_far_past_the_end_costs_no_memory(store):
    store.store("a", None, b"1", 1)
    tracemalloc.start()
    try:
        store.compact_to(10**15)
        seq = store.store("a", None, b"2", 2)
        store.remove(seq)
        seq2 = store.store("b", None, b"3", 3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (seq, seq2) == (10**15, 10**15 + 1)
    st = store.state(with_deleted=True)
    assert (st.first_seq, st.last_seq, st.messages, st.deleted) == (10**15 + 1, 10**15 + 1, 1, [])
    assert store.load(seq2).data == b"3"
    assert peak < 1 << 20, peak


def test_deletes_in_a_long_run_keep_answers_right(store):
    for i in range(3 * 200):
        store.store(f"k.{i % 3}", None, b"v", i + 1)
    for seq in range(1, 601, 2):
        store.remove(seq)
    store.compact_to(101)
    st = store.state(with_deleted=True, subjects_filter=">")
    assert st.first_seq == 102 and st.last_seq == 600 and st.messages == 250
    assert st.deleted == list(range(103, 600, 2))
    kept = range(102, 601, 2)
    assert st.subjects == {f"k.{k}": sum(1 for s in kept if (s - 1) % 3 == k) for k in range(3)}
    assert store.load_next("k.1", 103).seq == 104       # 104 - 1 = 103 is k.1
    assert store.load_next(">", 103).seq == 104
    assert store.num_pending(["k.2"], 1, 600) == sum(1 for s in kept if (s - 1) % 3 == 2)
    assert store.last_seq_for_subject("k.*") == 600
    for seq in range(102, 601, 2):
        store.remove(seq)
    st = store.state()
    assert (st.messages, st.first_seq, st.num_subjects) == (0, 601, 0)
    assert store.store("k.9", None, b"w", 999) == 601
    assert store.state().first_seq == 601


# --- block index files ---------------------------------------------------------------------

def _fill_blocks(d, n=60, block_bytes=600):
    """A store of ``n`` messages over several blocks, with removals (tombstones in later
    blocks) and a headers message; closed cleanly (its index files written)."""
    s = open_file_store(d, block_bytes=block_bytes)
    for i in range(n):
        s.store(f"ix.{i % 4}", b"NATS/1.0\r\n\r\n" if i % 7 == 0 else None,
                bytes([i % 251]) * (i % 40), 1_000 + i)
    for seq in (3, 17, 18, 40):
        s.remove(seq)
    s.sync()
    s.close()
    return s


def _indexes(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".idx"))


def _walked(d, **kw):
    """The store as walking every block gives it: opened from a copy of ``d`` without its
    index files (``d`` is left as it is)."""
    copy = d.parent / "walked"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(d, copy, ignore=shutil.ignore_patterns("*.idx"))
    s = open_file_store(copy, **kw)
    assert s.blocks_walked == len(blocks(copy))
    out = snapshot(s), s.recovery_report
    s.close()
    return out


def test_reopening_from_index_files_gives_what_walking_the_blocks_gives(tmp_path):
    d = tmp_path / "stream"
    _fill_blocks(d)
    # every block but the last, which holds the tombstones (not message records only)
    assert [n[:-4] for n in _indexes(d)] == [n[:-4] for n in blocks(d)[:-1]]
    assert len(blocks(d)) >= 3
    walked, report = _walked(d, block_bytes=600)
    s = open_file_store(d, block_bytes=600)
    assert s.blocks_walked == 1         # the others opened from their index files
    assert (snapshot(s), s.recovery_report) == (walked, report) and report == []
    st = s.state(with_deleted=True)
    assert (st.messages, st.last_seq, st.deleted) == (56, 60, [3, 17, 18, 40])
    assert s.store("ix.9", None, b"after", 5_000) == 61        # appends go on
    s.sync()
    s.close()
    s = open_file_store(d, block_bytes=600)
    assert s.load(61).data == b"after" and s.state().messages == 57
    s.close()


@pytest.mark.parametrize("damage", ["block_bit", "index_bit", "block_cut", "index_cut",
                                    "index_of_other_block"])
def test_an_index_file_that_does_not_describe_its_block_is_not_used(tmp_path, damage):
    d = tmp_path / "stream"
    _fill_blocks(d)
    blks = blocks(d)
    first = d / blks[0]
    idx = d / _indexes(d)[0]
    if damage == "block_bit":
        off, _ = record_offsets(first)[4]                   # seq 5
        flip_bit(first, off + HEADER_SIZE + 1)
    elif damage == "index_bit":
        flip_bit(idx, os.path.getsize(idx) - 3)
    elif damage == "block_cut":
        off, _ = record_offsets(first)[-1]
        os.truncate(first, off)
    elif damage == "index_cut":
        os.truncate(idx, os.path.getsize(idx) - 1)
    else:
        shutil.copy(d / _indexes(d)[1], idx)
    walked, report = _walked(d, block_bytes=600)
    s = open_file_store(d, block_bytes=600)
    assert (snapshot(s), s.recovery_report) == (walked, report)
    if damage == "block_bit":
        assert [r["kind"] for r in report] == ["checksum_mismatch"]
        with pytest.raises(CorruptMessage):
            s.load(s.state().lost[0])
    s.close()


def test_index_files_of_removed_blocks_go_with_them(tmp_path):
    d = tmp_path / "stream"
    _fill_blocks(d)
    s = open_file_store(d, block_bytes=600)
    s.compact_to(50)
    s.sync()
    s.close()
    have = {fmt.parse_block_name(n) for n in blocks(d)}
    assert {fmt.parse_index_name(n) for n in _indexes(d)} <= have
    (d / "00000000000000000001.idx").write_bytes(b"stale")
    (d / "00000000000000000077.idx.tmp").write_bytes(b"cut short")
    s = open_file_store(d, block_bytes=600)
    assert s.state().first_seq == 50 and s.recovery_report == []
    assert not any(n.endswith(".tmp") or n.startswith("00000000000000000001.") for n in os.listdir(d))
    s.close()
