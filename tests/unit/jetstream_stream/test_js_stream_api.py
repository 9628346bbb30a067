"""jetraft Stream: expire, STREAM.PURGE, STREAM.MSG.GET/DELETE and STREAM.INFO, as
nats-server answers them (server/jetstream_api.go, server/memstore.go expireMsgs)."""

from __future__ import annotations

import base64

import pytest
from nats.js.api import RawStreamMsg, StreamInfo as PyStreamInfo

from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import SECOND, StreamConfig
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream


def make(**cfg) -> Stream:
    cfg.setdefault("subjects", ["s.>"])
    return Stream(StreamConfig(name="S", **cfg), MemoryStore(), created_ns=5)


def filled(**cfg) -> Stream:
    s = make(**cfg)
    for i, subj in enumerate(["s.a", "s.b", "s.a", "s.c", "s.a"], start=1):
        s.publish(subj, None, f"m{i}".encode(), i * SECOND)
    return s


def code(fn, *args) -> int:
    with pytest.raises(JSApiError) as info:
        fn(*args)
    return info.value.err_code


def test_expire_max_age():
    s = filled(max_age=2 * SECOND)
    assert s.expire(3 * SECOND) == 1          # ts <= now - max_age
    assert s.store.state().first_seq == 2
    assert s.expire(10 * SECOND) == 4
    assert make().expire(10**18) == 0


@pytest.mark.parametrize("request_, purged, left", [
    ({}, 5, 0),
    (None, 5, 0),
    ({"filter": "s.a"}, 3, 2),
    ({"filter": "s.a", "keep": 1}, 2, 3),
    ({"seq": 3}, 2, 3),
    ({"filter": "s.a", "seq": 4}, 2, 3),
    ({"keep": 2}, 3, 2),
])
def test_purge_variants(request_, purged, left):
    s = filled()
    assert s.purge(request_) == {"success": True, "purged": purged}
    assert s.store.state().messages == left
    assert s.store.state().last_seq == 5


def test_purge_refusals():
    assert code(filled().purge, {"seq": 2, "keep": 1}) == 10003
    s = make(deny_purge=True)
    with pytest.raises(JSApiError) as info:
        s.purge({})
    assert (info.value.err_code, info.value.description) == (10110, "stream purge not permitted")


def test_get_message_variants_and_nats_py_shape():
    s = make()
    s.publish("s.a", b"NATS/1.0\r\nA: b\r\n\r\n", b"hello", 1_500_000_001)
    s.publish("s.b", None, b"", 2 * SECOND)
    s.publish("s.a", None, b"x", 3 * SECOND)
    m = s.get_message({"seq": 1})["message"]
    assert m == {"subject": "s.a", "seq": 1,
                 "hdrs": base64.b64encode(b"NATS/1.0\r\nA: b\r\n\r\n").decode(),
                 "data": base64.b64encode(b"hello").decode(),
                 "time": "1970-01-01T00:00:01.500000001Z"}
    raw = RawStreamMsg.from_response(m)
    assert raw.seq == 1 and raw.subject == "s.a"
    assert s.get_message({"seq": 2})["message"] == {"subject": "s.b", "seq": 2,
                                                    "time": "1970-01-01T00:00:02Z"}
    assert s.get_message({"last_by_subj": "s.a"})["message"]["seq"] == 3
    assert s.get_message({"next_by_subj": "s.a", "seq": 2})["message"]["seq"] == 3
    assert s.get_message({"next_by_subj": "s.*"})["message"]["seq"] == 1
    assert "hdrs" not in s.get_message({"seq": 1, "no_hdrs": True})["message"]


@pytest.mark.parametrize("request_, err", [
    ({"seq": 9}, 10037), ({"last_by_subj": "s.z"}, 10037),
    ({"next_by_subj": "s.a", "seq": 4}, 10037),
    ({}, 10003), ({"seq": 1, "last_by_subj": "s.a"}, 10003),
    ({"last_by_subj": "s.a", "next_by_subj": "s.a"}, 10003), ({"seq": 1, "batch": 2}, 10003),
])
def test_get_message_errors(request_, err):
    s = make()
    s.publish("s.a", None, b"", 1)
    s.publish("s.a", None, b"", 1)
    s.delete_message(1)
    assert code(s.get_message, request_ if request_ != {"seq": 9} else {"seq": 1}) == err
    if err == 10037:
        with pytest.raises(JSApiError) as info:
            s.get_message(request_)
        assert (info.value.code, info.value.description) == (404, "no message found")


def test_delete_message():
    s = filled()
    assert s.delete_message(2) == {"success": True}
    with pytest.raises(JSApiError) as info:
        s.delete_message(2)
    assert (info.value.err_code, info.value.description) == (10043, "sequence 2 not found")
    d = make(deny_delete=True)
    d.publish("s.a", None, b"", 1)
    with pytest.raises(JSApiError) as info:
        d.delete_message(1)
    assert (info.value.err_code, info.value.description) == (10057, "message delete not permitted")


def test_info_shape_readable_by_nats_py():
    s = filled()
    s.delete_message(2)
    info = s.info(9 * SECOND, subjects_filter=">", deleted_details=True)
    assert set(info) >= {"config", "created", "state", "ts"}
    assert info["created"] == "1970-01-01T00:00:00.000000005Z"
    assert info["ts"] == "1970-01-01T00:00:09Z"
    st = info["state"]
    assert (st["messages"], st["first_seq"], st["last_seq"], st["num_deleted"]) == (4, 1, 5, 1)
    assert st["deleted"] == [2] and st["subjects"] == {"s.a": 3, "s.c": 1}
    parsed = PyStreamInfo.from_response(info)
    assert parsed.config.name == "S" and parsed.state.messages == 4
    empty = make().info(1)
    assert empty["state"]["first_ts"] == "0001-01-01T00:00:00Z"
    assert "subjects" not in empty["state"] and "domain" not in empty
    PyStreamInfo.from_response(empty)


def test_retention_hook_is_inert_for_limits():
    s = filled()
    assert s.ack_floor_for_retention(3) == 0
    w = filled(retention="workqueue")
    assert w.ack_floor_for_retention(3) == 3
