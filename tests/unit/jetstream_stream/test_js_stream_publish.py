"""jetraft Stream.publish: expected headers, dedupe, rollups and limits, with the error
codes and descriptions nats-server answers (server/stream.go processJetStreamMsg,
server/memstore.go storeRawMsg)."""

from __future__ import annotations

import pytest

from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import SECOND, StreamConfig
from jetraft.jetstream.store import MemoryStore, msg_size
from jetraft.jetstream.stream import Stream
from jetraft.storage.group_commit import GroupCommit
from jetraft.jetstream.store import FileStore


def hdrs(**kv: str) -> bytes:
    lines = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in kv.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def make(**cfg) -> Stream:
    cfg.setdefault("subjects", ["s.>"])
    return Stream(StreamConfig(name="S", **cfg), MemoryStore())


def refused(stream, subject, headers, data=b"x", now=1) -> JSApiError:
    with pytest.raises(JSApiError) as info:
        stream.publish(subject, headers, data, now)
    return info.value


def test_ack_shape_and_domain():
    s = make()
    assert s.publish("s.a", None, b"1", 1) == {"stream": "S", "seq": 1}
    d = Stream(StreamConfig(name="D"), MemoryStore(), domain="hub")
    assert d.publish("D", None, b"", 1) == {"stream": "D", "domain": "hub", "seq": 1}


def test_expected_stream():
    s = make()
    err = refused(s, "s.a", hdrs(Nats_Expected_Stream="T"))
    assert (err.code, err.err_code, err.description) == (400, 10060, "expected stream does not match")
    assert s.publish("s.a", hdrs(Nats_Expected_Stream="S"), b"", 1)["seq"] == 1


def test_expected_last_sequence():
    s = make()
    s.publish("s.a", None, b"", 1)
    err = refused(s, "s.a", hdrs(Nats_Expected_Last_Sequence="5"))
    assert (err.err_code, err.description) == (10071, "wrong last sequence: 1")
    assert refused(s, "s.a", hdrs(Nats_Expected_Last_Sequence="junk")).err_code == 10071
    assert s.publish("s.a", hdrs(Nats_Expected_Last_Sequence="1"), b"", 2)["seq"] == 2


def test_expected_last_subject_sequence():
    s = make()
    s.publish("s.a", None, b"", 1)
    s.publish("s.b", None, b"", 1)
    err = refused(s, "s.a", hdrs(Nats_Expected_Last_Subject_Sequence="2"))
    assert (err.err_code, err.description) == (10071, "wrong last sequence: 1")
    assert s.publish("s.a", hdrs(Nats_Expected_Last_Subject_Sequence="1"), b"", 1)["seq"] == 3
    # 0 means "no message on the subject yet"
    assert s.publish("s.c", hdrs(Nats_Expected_Last_Subject_Sequence="0"), b"", 1)["seq"] == 4
    # the subject checked may be overridden
    h = hdrs(Nats_Expected_Last_Subject_Sequence="2",
             Nats_Expected_Last_Subject_Sequence_Subject="s.b")
    assert s.publish("s.z", h, b"", 1)["seq"] == 5
    err = refused(s, "s.a", hdrs(Nats_Expected_Last_Subject_Sequence_Subject="s.b"))
    assert (err.err_code, err.description) == (10193, "missing sequence for expected last sequence per subject")


def test_expected_last_msg_id():
    s = make()
    s.publish("s.a", hdrs(Nats_Msg_Id="a"), b"", 1)
    err = refused(s, "s.a", hdrs(Nats_Expected_Last_Msg_Id="b"))
    assert (err.code, err.err_code, err.description) == (400, 10070, "wrong last msg ID: a")
    assert s.publish("s.a", hdrs(Nats_Expected_Last_Msg_Id="a"), b"", 2)["seq"] == 2
    # the last message had no id: the last id is now ""
    assert refused(s, "s.a", hdrs(Nats_Expected_Last_Msg_Id="a")).description == "wrong last msg ID: "


def test_max_msg_size_counts_headers():
    s = make(max_msg_size=10)
    assert s.publish("s.a", None, b"x" * 10, 1)["seq"] == 1
    err = refused(s, "s.a", None, b"x" * 11)
    assert (err.code, err.err_code, err.description) == (400, 10054, "message size exceeds maximum allowed")
    assert refused(s, "s.a", hdrs(A="b"), b"x").err_code == 10054


def test_dedupe_inside_and_outside_window():
    s = make(duplicate_window=10 * SECOND)
    assert s.publish("s.a", hdrs(Nats_Msg_Id="m"), b"", 1 * SECOND) == {"stream": "S", "seq": 1}
    s.publish("s.a", None, b"", 2 * SECOND)
    dup = s.publish("s.a", hdrs(Nats_Msg_Id="m"), b"", 10 * SECOND)
    assert dup == {"stream": "S", "seq": 1, "duplicate": True}
    assert s.store.state().messages == 2
    # window elapsed (now - ts >= window): stored again
    assert s.publish("s.a", hdrs(Nats_Msg_Id="m"), b"", 11 * SECOND) == {"stream": "S", "seq": 3}


def test_dedupe_disabled_with_zero_window_after_checked():
    # duplicate_window 0 becomes the 2 min default: dedupe is on by default
    s = make()
    s.publish("s.a", hdrs(Nats_Msg_Id="m"), b"", 1)
    assert s.publish("s.a", hdrs(Nats_Msg_Id="m"), b"", 2)["duplicate"] is True


def test_dedupe_rebuilt_from_reopened_file_store(tmp_path):
    cfg = StreamConfig(name="S", subjects=["s.>"], duplicate_window=10 * SECOND)
    gc = GroupCommit()
    store = FileStore(tmp_path / "s", sync=gc)
    s = Stream(cfg, store)
    s.publish("s.a", hdrs(Nats_Msg_Id="old"), b"", 1 * SECOND)
    s.publish("s.a", hdrs(Nats_Msg_Id="new"), b"", 8 * SECOND)
    store.sync()
    store.close()
    store = FileStore(tmp_path / "s", sync=gc)
    s2 = Stream(cfg, store, now_ns=12 * SECOND)
    assert s2.last_seq == 2 and s2.last_msg_id == "new"
    assert s2.publish("s.a", hdrs(Nats_Msg_Id="new"), b"", 12 * SECOND)["duplicate"] is True
    assert s2.publish("s.a", hdrs(Nats_Msg_Id="old"), b"", 12 * SECOND) == {"stream": "S", "seq": 3}
    store.close()


def test_rollup_refused_or_invalid():
    s = make()
    err = refused(s, "s.a", hdrs(Nats_Rollup="sub"))
    assert (err.code, err.err_code, err.description) == (500, 10111, "rollup not permitted")
    r = make(allow_rollup_hdrs=True)
    err = refused(r, "s.a", hdrs(Nats_Rollup="Bogus"))
    assert (err.err_code, err.description) == (10111, 'rollup value invalid: "bogus"')


def test_rollup_sub_and_all():
    s = make(allow_rollup_hdrs=True)
    for subj in ("s.a", "s.a", "s.b", "s.a"):
        s.publish(subj, None, b"", 1)
    assert s.publish("s.a", hdrs(Nats_Rollup="SUB"), b"r", 2)["seq"] == 5
    assert s.store.subjects_state(">") == {"s.a": 1, "s.b": 1}
    assert s.publish("s.c", hdrs(Nats_Rollup="all"), b"r", 3)["seq"] == 6
    st = s.store.state()
    assert (st.messages, st.first_seq, st.last_seq) == (1, 6, 6)


@pytest.mark.parametrize("discard", ["old", "new"])
def test_max_msgs(discard):
    s = make(max_msgs=2, discard=discard)
    s.publish("s.a", None, b"1", 1)
    s.publish("s.a", None, b"2", 1)
    if discard == "old":
        assert s.publish("s.a", None, b"3", 1)["seq"] == 3
        assert (s.store.state().first_seq, s.store.state().messages) == (2, 2)
    else:
        err = refused(s, "s.a", None)
        assert (err.code, err.err_code, err.description) == (503, 10077, "maximum messages exceeded")
        assert s.store.state().last_seq == 2 and s.last_seq == 2


@pytest.mark.parametrize("discard", ["old", "new"])
def test_max_bytes(discard):
    s = make(max_bytes=2 * MemoryStore.msg_size("s.a", None, b"12345"), discard=discard)
    one = s.store.msg_size("s.a", None, b"12345")
    s.publish("s.a", None, b"12345", 1)
    s.publish("s.a", None, b"12345", 1)
    if discard == "old":
        s.publish("s.a", None, b"12345", 1)
        st = s.store.state()
        assert (st.messages, st.first_seq, st.bytes) == (2, 2, 2 * one)
    else:
        err = refused(s, "s.a", None, b"12345")
        assert (err.err_code, err.description) == (10077, "maximum bytes exceeded")


def test_max_msgs_per_subject_discard_old():
    s = make(max_msgs_per_subject=2)
    for i in range(4):
        s.publish("s.a", None, str(i).encode(), 1)
    s.publish("s.b", None, b"", 1)
    assert s.store.subjects_state(">") == {"s.a": 2, "s.b": 1}
    assert s.store.load_next("s.a", 0).data == b"2"


def test_max_msgs_per_subject_discard_new():
    s = make(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True,
             allow_rollup_hdrs=True)
    s.publish("s.a", None, b"1", 1)
    err = refused(s, "s.a", None)
    assert (err.code, err.err_code, err.description) == (503, 10077, "maximum messages per subject exceeded")
    # a rollup gets through, and the limit keeps the newest
    assert s.publish("s.a", hdrs(Nats_Rollup="sub"), b"2", 1)["seq"] == 2
    assert s.store.state().messages == 1
    # without discard_new_per_subject the subject's oldest is replaced
    t = make(max_msgs_per_subject=1, discard="new")
    t.publish("s.a", None, b"1", 1)
    assert t.publish("s.a", None, b"2", 1)["seq"] == 2
    assert t.store.state().messages == 1


def test_max_msgs_new_allows_replacement_at_subject_limit():
    s = make(max_msgs=1, max_msgs_per_subject=1, discard="new")
    s.publish("s.a", None, b"1", 1)
    assert s.publish("s.a", None, b"2", 1)["seq"] == 2
    assert refused(s, "s.b", None).description == "maximum messages exceeded"


def test_sealed_and_ttl_disabled():
    s = make()
    err = refused(s, "s.a", hdrs(Nats_TTL="5"))
    assert (err.err_code, err.description) == (10166, "per-message TTL is disabled")
    s.config.sealed = True
    assert refused(s, "s.a", None).err_code == 10109


def test_refusal_changes_nothing():
    s = make(duplicate_window=SECOND)
    s.publish("s.a", hdrs(Nats_Msg_Id="a"), b"", 1)
    refused(s, "s.a", hdrs(Nats_Msg_Id="b", Nats_Expected_Last_Sequence="9"))
    assert s.last_msg_id == "a" and [e[0] for e in s.dedupe_entries()] == ["a"]
