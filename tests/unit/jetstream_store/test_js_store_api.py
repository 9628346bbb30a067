"""The message store API, the same for MemoryStore and FileStore: store/load, subject
lookups, remove, and nats-server's purge/compact/first_seq semantics (memstore.go Purge,
PurgeEx, Compact)."""

from __future__ import annotations

import pytest
from js_store_helpers import make_store

from jetraft.jetstream.store import MemoryStore, MessageNotFound, StoredMessage, msg_size
from jetraft.protocol.subjects import subject_matches


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    s = make_store(request.param, tmp_path, block_bytes=512)
    yield s
    s.close()


def fill(store, subjects: list[str]) -> list[int]:
    return [store.store(subj, None, f"m{i}".encode(), 1000 + i)
            for i, subj in enumerate(subjects, start=1)]


def live(store) -> list[int]:
    out, seq = [], 1
    while (m := store.load_next(">", seq)) is not None:
        out.append(m.seq)
        seq = m.seq + 1
    return out


def test_empty_state(store):
    st = store.state()
    assert (st.messages, st.bytes, st.first_seq, st.last_seq, st.first_ts, st.last_ts,
            st.num_subjects, st.num_deleted) == (0, 0, 1, 0, 0, 0, 0, 0)
    assert store.load_next(">", 1) is None
    assert store.load_last("a") is None
    assert store.last_seq_for_subject("a") == 0
    with pytest.raises(MessageNotFound):
        store.load(1)


def test_store_and_load(store):
    hdr = b"NATS/1.0\r\nA: b\r\n\r\n"
    assert store.store("orders.new", hdr, b"payload", 123) == 1
    assert store.store("orders.old", None, b"", 456) == 2
    assert store.store("é.\udcff", b"", b"\x00\xff", 789) == 3   # surrogateescape subject
    assert store.load(1) == StoredMessage(1, "orders.new", hdr, b"payload", 123)
    assert store.load(2) == StoredMessage(2, "orders.old", None, b"", 456)
    assert store.load(3) == StoredMessage(3, "é.\udcff", b"", b"\x00\xff", 789)
    st = store.state()
    assert (st.messages, st.first_seq, st.last_seq, st.first_ts, st.last_ts) == (3, 1, 3, 123, 789)
    assert st.bytes == (store.msg_size("orders.new", hdr, b"payload") + store.msg_size("orders.old", None, b"")
                        + store.msg_size("é.\udcff", b"", b"\x00\xff"))
    assert msg_size("a", None, b"xy") == 33 and msg_size("a", b"hh", b"xy") == 39     # file store
    assert MemoryStore.msg_size("a", None, b"xy") == 19 and MemoryStore.msg_size("a", b"hh", b"xy") == 21
    with pytest.raises(MessageNotFound):
        store.load(4)
    with pytest.raises(MessageNotFound):
        store.load(0)


def test_subject_lookups(store):
    fill(store, ["a.1", "b.1", "a.2", "a.1", "b.2.x", "a.1"])
    assert store.load_next("a.1", 1).seq == 1
    assert store.load_next("a.1", 2).seq == 4
    assert store.load_next("a.*", 2).seq == 3
    assert store.load_next("b.>", 3).seq == 5
    assert store.load_next("*.2", 4) is None
    assert store.load_next("", 6).seq == 6
    assert store.load_next(">", 7) is None
    assert store.load_last("a.1").seq == 6
    assert store.load_last("b.1").seq == 2
    assert store.load_last("zzz") is None
    assert store.last_seq_for_subject("a.2") == 3
    assert store.last_seq_for_subject("a.*") == 6
    assert store.subjects_state(">") == {"a.1": 3, "b.1": 1, "a.2": 1, "b.2.x": 1}
    assert store.subjects_state("a.*") == {"a.1": 3, "a.2": 1}
    assert store.subjects_state("b.2.x") == {"b.2.x": 1}
    st = store.state(subjects_filter="b.>")
    assert st.num_subjects == 4 and st.subjects == {"b.1": 1, "b.2.x": 1}
    assert store.remove(6)
    assert store.load_last("a.1").seq == 4
    assert store.last_seq_for_subject("a.1") == 4


def test_remove_moves_first_but_not_last(store):
    fill(store, ["a"] * 5)
    assert store.remove(3)
    assert not store.remove(3)
    assert not store.remove(99)
    with pytest.raises(MessageNotFound):
        store.load(3)
    st = store.state(with_deleted=True)
    assert (st.messages, st.first_seq, st.last_seq) == (4, 1, 5)
    assert (st.num_deleted, st.deleted) == (1, [3])
    assert store.remove(1) and store.remove(2)
    st = store.state(with_deleted=True)
    assert (st.first_seq, st.first_ts, st.num_deleted, st.deleted) == (4, 1004, 0, [])
    assert store.remove(5)
    st = store.state()
    assert (st.messages, st.first_seq, st.last_seq, st.last_ts) == (1, 4, 5, 1005)
    assert store.remove(4)
    st = store.state()
    assert (st.messages, st.bytes, st.first_seq, st.last_seq, st.first_ts) == (0, 0, 6, 5, 0)
    assert store.store("a", None, b"", 1) == 6


def test_purge_all_keeps_last_seq(store):
    fill(store, ["a", "b", "c"])
    assert store.purge() == 3
    st = store.state()
    assert (st.messages, st.bytes, st.first_seq, st.last_seq, st.last_ts) == (0, 0, 4, 3, 1003)
    assert store.purge() == 0
    assert store.store("a", None, b"", 1) == 4
    assert store.state().first_seq == 4


def test_purge_subject_filter(store):
    fill(store, ["a.1", "b", "a.2", "b", "a.1", "c"])
    assert store.purge("a.*") == 3
    assert live(store) == [2, 4, 6]
    assert store.purge("zzz") == 0
    assert store.purge("b") == 2
    st = store.state()
    assert (st.first_seq, st.last_seq, st.messages) == (6, 6, 1)


def test_purge_subject_up_to_seq_exclusive(store):
    fill(store, ["a", "b", "a", "a", "b", "a"])
    assert store.purge("a", seq=4) == 2           # 1 and 3; 4 is kept
    assert live(store) == [2, 4, 5, 6]
    assert store.state().first_seq == 2


def test_purge_subject_keep(store):
    fill(store, ["a", "b", "a", "a", "b", "a"])
    assert store.purge("a", keep=2) == 2          # keeps the 2 newest "a": 4 and 6
    assert live(store) == [2, 4, 5, 6]
    assert store.purge("a", keep=5) == 0
    assert store.purge("b", keep=0) == 2


def test_purge_whole_stream_seq_and_keep(store):
    fill(store, ["a"] * 10)
    assert store.purge(seq=4) == 3                # Compact(4)
    assert store.state().first_seq == 4
    assert store.purge(seq=1) == 0
    assert store.purge(">", keep=3) == 4          # Compact(last - 3 + 1) = Compact(8)
    assert live(store) == [8, 9, 10]
    assert store.purge(keep=3) == 0
    with pytest.raises(ValueError):
        store.purge("a", seq=2, keep=1)


def test_keep_counts_from_last_seq_like_nats_server(store):
    fill(store, ["a"] * 6)
    store.remove(5)
    # nats-server compacts to last_seq - keep + 1: the gap is inside the kept range
    assert store.purge(keep=2) == 4
    assert live(store) == [6]


def test_compact(store):
    fill(store, ["a", "b", "c", "d", "e"])
    store.remove(3)
    assert store.compact_to(1) == 0
    assert store.compact_to(3) == 2
    st = store.state()
    assert (st.first_seq, st.first_ts, st.messages) == (4, 1004, 2)   # next existing message
    assert store.compact_to(2) == 0
    assert store.compact_to(0) == 2               # Compact(0) is Purge
    assert store.state().first_seq == 6


def test_compact_past_the_end_moves_sequences_on(store):
    fill(store, ["a", "b"])
    assert store.compact_to(10) == 2
    st = store.state()
    assert (st.messages, st.first_seq, st.last_seq) == (0, 10, 9)
    assert store.store("x", None, b"", 5) == 10
    st = store.state()
    assert (st.first_seq, st.last_seq) == (10, 10)


def test_compact_to_next_seq_empties(store):
    fill(store, ["a", "b"])
    assert store.compact_to(3) == 2
    st = store.state()
    assert (st.messages, st.first_seq, st.last_seq) == (0, 3, 2)


def test_deleted_list_and_counts(store):
    fill(store, ["a"] * 8)
    for s in (2, 5, 6):
        store.remove(s)
    st = store.state(with_deleted=True)
    assert st.deleted == [2, 5, 6] and st.num_deleted == 3 and st.messages == 5
    assert store.state().deleted == []            # only when asked


def test_closed_store_refuses(store):
    store.close()
    with pytest.raises(Exception):
        store.store("a", None, b"", 1)


def test_subject_of_and_num_pending_answer_from_the_index(store):
    subjects = [f"orders.{'eu' if i % 3 else 'us'}.{i % 5}" for i in range(1, 5001)]
    fill(store, subjects)
    store.remove(3)
    store.remove(4000)
    assert store.subject_of(1) == "orders.eu.1"
    assert store.subject_of(3) is None and store.subject_of(9999) is None

    def brute(filters, start, last):
        return sum(1 for seq in range(start, last + 1)
                   if (subj := store.subject_of(seq)) is not None
                   and (not filters or any(subject_matches(f, subj) for f in filters)))

    # short ranges are walked, long ones counted per subject: both give the same answer
    for filters in ([], ["orders.us.*"], ["orders.eu.1", "orders.*.2"], [">"], ["nothing.here"]):
        for start, last in ((1, 10), (2, 2047), (1, 5000), (3, 4000), (2500, 9999), (10, 9)):
            assert store.num_pending(filters, start, last) == brute(filters, start, last), (filters, start, last)
    assert store.num_pending([], 1, 5000) == 4998
