"""A store with a huge gap in its sequences (a restore to a far sequence, a hostile one): its
deleted sequences are listed as runs and capped, and nothing walks the gap.

An attacker restored a stream with messages at 1 and 30,000,000 and asked STREAM.INFO for
``deleted_details``: listing every missing sequence froze the server for seconds and
peaked at 1.7 GB. Here the gap is 10**12 - 1 sequences: anything that walks it one
sequence at a time never ends (or fails at once, asking for terabytes). What an operator
or client sees: ``state(with_deleted=True)`` (STREAM.INFO ``deleted_details``) lists the
lowest :data:`MAX_DELETED_DETAILS` deleted sequences and gives the true ``num_deleted``;
``deleted_runs()`` gives them all as ``(first, last)`` runs; num_pending, load_next and a
stream opened over the store (its dedupe window rebuilt) answer at once.
"""

from __future__ import annotations

import os
import tracemalloc

import pytest
from js_store_helpers import make_store, open_file_store

from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.store import MAX_DELETED_DETAILS, MemoryStore
from jetraft.jetstream.stream import Stream

GAP = 10**12
FAR = GAP + 1           # the message after the gap: sequences 2 .. GAP are deleted
T0 = 1_700_000_000_000_000_000
HDR_ONE = b"NATS/1.0\r\nNats-Msg-Id: one\r\n\r\n"
HDR_TWO = b"NATS/1.0\r\nNats-Msg-Id: two\r\n\r\n"

# Anything walking the gap never ends: fail instead of waiting for the suite's timeout.
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["memory", "file"])
def kind(request) -> str:
    return request.param


def gapped(kind: str, tmp_path, **kw):
    """Messages at 1 ("a") and 10**12 + 1 ("b"), stored as a restore stores them."""
    store = make_store(kind, tmp_path, **kw)
    store.store("a", HDR_ONE, b"first", T0)
    store.store_at(FAR, "b", HDR_TWO, b"far", T0 + 1)
    return store


def reopened(store, tmp_path, *, index_files: bool = True):
    """The FileStore ``store`` closed and opened again (from its index files, or by walking
    its blocks when ``index_files`` is False)."""
    store.sync()
    store.close()
    d = tmp_path / "stream"
    if not index_files:
        for name in os.listdir(d):
            if name.endswith(".idx"):
                os.unlink(d / name)
    return open_file_store(d)


def check_capped_listing(store) -> None:
    tracemalloc.start()
    try:
        st = store.state(with_deleted=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (st.messages, st.first_seq, st.last_seq) == (2, 1, FAR)
    assert st.num_deleted == GAP - 1
    assert MAX_DELETED_DETAILS == 100_000
    assert len(st.deleted) == MAX_DELETED_DETAILS
    assert st.deleted == list(range(2, 2 + MAX_DELETED_DETAILS))
    # the list and its ints, nothing in proportion to the gap (the old listing asked for 8 TB)
    assert peak < 16 << 20, peak
    assert list(store.deleted_runs()) == [(2, GAP)]


def test_deleted_details_over_a_gap_of_10_12_are_the_lowest_100000(kind, tmp_path):
    store = gapped(kind, tmp_path)
    check_capped_listing(store)
    # the common path has no list at all
    st = store.state()
    assert (st.num_deleted, st.deleted) == (GAP - 1, [])
    store.close()


@pytest.mark.parametrize("index_files", [True, False], ids=["index-files", "walked"])
def test_a_reopened_file_store_lists_the_gap_the_same_way(tmp_path, index_files):
    store = reopened(gapped("file", tmp_path), tmp_path, index_files=index_files)
    check_capped_listing(store)
    assert store.load(FAR).data == b"far"
    store.close()


def test_num_pending_and_load_next_jump_the_gap(kind, tmp_path):
    store = gapped(kind, tmp_path)
    # long ranges (counted per subject) and short ones (walked) on both sides of the gap
    assert store.num_pending([], 1, FAR) == 2
    assert store.num_pending([], 2, FAR) == 1
    assert store.num_pending(["b"], 1, FAR) == 1
    assert store.num_pending(["a", "b"], 2, GAP) == 0
    assert store.num_pending([">"], 1, 10**15) == 2
    assert store.num_pending([], GAP - 10, FAR) == 1
    assert store.num_pending(["a"], 1, 100) == 1
    assert store.load_next(">", 2).seq == FAR
    assert store.load_next("", 2).data == b"far"
    assert store.load_next("b", 0).seq == FAR
    assert store.load_next("a", 2) is None
    assert store.load_next(">", FAR + 1) is None
    assert list(store.stored_seqs(1, FAR)) == [1, FAR]
    assert list(store.stored_seqs(2, 10**15)) == [FAR]
    assert list(store.stored_seqs(2, GAP)) == []
    assert list(store.stored_seqs(0, 10**15, descending=True)) == [FAR, 1]
    # the first message goes: the first sequence jumps the gap, nothing is deleted any more
    assert store.remove(1)
    st = store.state(with_deleted=True)
    assert (st.first_seq, st.last_seq, st.num_deleted, st.deleted) == (FAR, FAR, 0, [])
    assert list(store.deleted_runs()) == []
    store.close()


def test_opening_a_stream_over_the_gap_rebuilds_its_dedupe_window(kind, tmp_path):
    # nats-server rebuildDedupe: the message ids within duplicate_window of the newest
    # message, found from the last sequence down (here every sequence but two is missing)
    store = gapped(kind, tmp_path)
    stream = Stream(StreamConfig(name="S", subjects=["a", "b"]), store, now_ns=T0 + 2)
    assert stream.dedupe_entries() == [("one", 1, T0), ("two", FAR, T0 + 1)]
    assert stream.last_msg_id == "two"
    assert stream.publish("b", HDR_ONE, b"again", T0 + 3) == {"stream": "S", "seq": 1,
                                                              "duplicate": True}
    store.close()


# --- runs: padded slots, removed messages, gaps between segments ---------------------------

def shaped(kind: str, tmp_path):
    """1..5, 10 (6..9 padded in place), 10**12 and 10**12 + 1 after a gap (a new index
    segment), last_seq moved on to 10**12 + 50; message 3 removed."""
    store = make_store(kind, tmp_path)
    for i in range(1, 6):
        store.store(f"s.{i}", None, b"v", T0 + i)
    store.store_at(10, "s.10", None, b"v", T0 + 10)
    store.store_at(GAP, "s.far", None, b"v", T0 + 11)
    store.store("s.far", None, b"v", T0 + 12)
    store.skip_to(GAP + 50)
    assert store.remove(3)
    return store


SHAPED_RUNS = [(3, 3), (6, 9), (11, GAP - 1), (GAP + 2, GAP + 50)]


def check_shaped(store) -> None:
    assert list(store.deleted_runs()) == SHAPED_RUNS
    st = store.state(with_deleted=True)
    assert st.num_deleted == sum(b - a + 1 for a, b in SHAPED_RUNS)
    assert st.deleted[:6] == [3, 6, 7, 8, 9, 11]
    assert st.deleted[-1] == 11 + MAX_DELETED_DETAILS - 6
    assert len(st.deleted) == MAX_DELETED_DETAILS
    assert st.deleted == sorted(set(st.deleted))


def test_runs_of_padded_slots_removed_messages_and_gaps(kind, tmp_path):
    store = shaped(kind, tmp_path)
    check_shaped(store)
    # a removed message next to a run joins it, across the end of a segment too
    assert store.remove(10)
    assert list(store.deleted_runs()) == [(3, 3), (6, GAP - 1), (GAP + 2, GAP + 50)]
    assert store.remove(4)
    assert list(store.deleted_runs()) == [(3, 4), (6, GAP - 1), (GAP + 2, GAP + 50)]
    # the first messages go: the runs start at the new first sequence
    for seq in (1, 2, 5):
        assert store.remove(seq)
    st = store.state(with_deleted=True)
    assert (st.first_seq, st.messages, st.num_deleted) == (GAP, 2, 49)
    assert list(store.deleted_runs()) == [(GAP + 2, GAP + 50)]
    assert st.deleted == list(range(GAP + 2, GAP + 51))
    store.close()


@pytest.mark.parametrize("index_files", [True, False], ids=["index-files", "walked"])
def test_runs_survive_reopening_a_file_store(tmp_path, index_files):
    store = reopened(shaped("file", tmp_path), tmp_path, index_files=index_files)
    check_shaped(store)
    store.close()


def test_an_emptied_block_between_others_is_one_run(tmp_path):
    # FileStore: a segment per block; a block whose messages are all gone leaves the index,
    # the sequences it held become a gap between its neighbours' segments
    store = open_file_store(tmp_path / "stream", block_bytes=200)
    for i in range(1, 31):
        store.store("keep" if i in (1, 30) else "drop", None, b"x" * 20, T0 + i)
    assert store.purge("drop") == 28
    first, last = store._index.segs       # noqa: SLF001 - the shape this test is about
    assert first.end < last.base            # the emptied blocks' segments are gone
    assert list(store.deleted_runs()) == [(2, 29)]
    st = store.state(with_deleted=True)
    assert (st.num_deleted, st.deleted) == (28, list(range(2, 30)))
    store = reopened(store, tmp_path)
    assert list(store.deleted_runs()) == [(2, 29)]
    assert store.state(with_deleted=True).deleted == list(range(2, 30))
    store.close()


def test_many_removed_messages_are_listed_up_to_the_cap():
    # no gap at all: every other message of 210,000 removed, 105,000 deleted sequences in
    # the slots of the index's segments (1,024 subjects: short per-subject lists)
    store = MemoryStore()
    n = 2 * (MAX_DELETED_DETAILS + 5_000)
    for i in range(n):
        store.store(f"m.{i % 1024}", None, b"", i)
    for seq in range(2, n + 1, 2):
        store.remove(seq)
    st = store.state(with_deleted=True)
    # last_seq stays the last one used: the removed n is counted too
    assert (st.first_seq, st.last_seq, st.messages, st.num_deleted) == (1, n, n // 2, n // 2)
    assert st.deleted == list(range(2, 2 * MAX_DELETED_DETAILS + 1, 2))
    runs = list(store.deleted_runs())
    assert len(runs) == n // 2 and runs[0] == (2, 2) and runs[-1] == (n, n)


def test_a_short_listing_is_whole(kind, tmp_path):
    store = make_store(kind, tmp_path)
    for i in range(1, 9):
        store.store("s", None, b"v", T0 + i)
    for seq in (2, 3, 7):
        store.remove(seq)
    st = store.state(with_deleted=True)
    assert (st.num_deleted, st.deleted) == (3, [2, 3, 7])
    assert list(store.deleted_runs()) == [(2, 3), (7, 7)]
    assert make_store("memory", tmp_path).state(with_deleted=True).deleted == []
    store.close()


# --- subject pages (STREAM.INFO subjects_filter) -----------------------------------------

def test_subject_pages_are_sorted_slices(kind, tmp_path):
    store = make_store(kind, tmp_path)
    names = [f"p.{i:02d}" for i in range(12)]
    for i, name in enumerate(reversed(names)):
        for _ in range(i % 3 + 1):
            store.store(name, None, b"v", T0 + i)
    counts = {name: store.subjects_state(name)[name] for name in names}
    assert store.subjects_page(">") == (12, counts)
    assert list(store.subjects_page(">")[1]) == names
    assert store.subjects_page("p.*", 0, 5) == (12, {n: counts[n] for n in names[:5]})
    assert store.subjects_page("p.*", 10, 5) == (12, {n: counts[n] for n in names[10:]})
    assert store.subjects_page(">", 12, 5) == (12, {})
    assert store.subjects_page(">", 99) == (12, {})
    assert store.subjects_page(">", -3, 2) == (12, {n: counts[n] for n in names[:2]})
    assert store.subjects_page("q.>") == (0, {})
    st = store.state(subjects_filter="p.*", subjects_offset=3)
    assert (st.subjects_total, st.subjects) == (12, {n: counts[n] for n in names[3:]})
    store.close()
