"""Counter streams, sans-IO (jetstream/counter.py and Stream.publish): increments of any
size in linear time, a broken last message or sourced value refused with 10172 and nothing
stored, sourced values turned into differences with ``Nats-Counter-Sources``, and
``set_header`` as nats-server's setHeader."""

from __future__ import annotations

import json

import pytest

from jetraft.jetstream.errors import JSApiError
from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream
from jetraft.protocol.headers import get_header, set_header

T0 = 1_800_000_000_000_000_000


def counter_stream(**cfg) -> Stream:
    config = StreamConfig.from_json({"name": "C", "subjects": ["c.>"], "storage": "memory",
                                     "allow_msg_counter": True, **cfg})
    return Stream(config, MemoryStore())


def incr(value: str, extra: str = "") -> bytes:
    return f"NATS/1.0\r\nNats-Incr: {value}\r\n{extra}\r\n".encode()


def code_of(call) -> int:
    with pytest.raises(JSApiError) as info:
        call()
    return info.value.to_json()["err_code"]


def test_a_huge_increment_is_added_exactly():
    s = counter_stream()
    digits = "9" * 60_000                    # a header block holds at most 65,535 bytes
    for _ in range(3):
        ack = s.publish("c.a", incr(digits), b"", T0)
    assert ack["val"] == _times_three(digits)
    assert s.store.load(ack["seq"]).data == b'{"val":"' + ack["val"].encode() + b'"}'


def _times_three(nines: str) -> str:
    """3 * (10**n - 1) written out: "2" then n-1 "9"s then "7"."""
    return "2" + "9" * (len(nines) - 1) + "7"


def test_a_broken_last_message_is_refused_and_nothing_is_stored():
    store = MemoryStore()
    store.store("c.a", incr("1"), b"not json", T0)
    store.store("c.b", b"NATS/1.0\r\nNats-Counter-Sources: [1]\r\n\r\n", b'{"val":"1"}', T0)
    store.store("c.c", incr("1"), b'{"val":5}', T0)
    store.store("c.d", incr("1"), b'{"val":"1.5"}', T0)
    s = Stream(StreamConfig.from_json({"name": "C", "subjects": ["c.>"], "storage": "memory",
                                       "allow_msg_counter": True}), store)
    for subject in ("c.a", "c.b", "c.c", "c.d"):
        assert code_of(lambda subject=subject: s.publish(subject, incr("1"), b"", T0)) == 10172
    assert s.store.state().messages == 4
    # what Go's decoder reads as no value counts from 0
    store.store("c.e", incr("1"), b"null", T0)
    store.store("c.f", incr("1"), b'{"VAL":"4","other":1}', T0)
    assert s.publish("c.e", incr("2"), b"", T0)["val"] == "2"
    assert s.publish("c.f", incr("2"), b"", T0)["val"] == "6"


def test_a_sourced_value_becomes_the_difference_from_the_last_one_from_its_origin():
    s = counter_stream(subjects=[], sources=[{"name": "A"}, {"name": "B"}])

    def sourced(origin: str, seq: int, value: str, extra: str = "") -> dict:
        source = f"Nats-Stream-Source: {origin} {seq} > > c.x\r\n"
        return s.publish_message("c.x", incr("1", source + extra), f'{{"val":"{value}"}}'.encode(), T0,
                                 sourced=True)[0]

    assert sourced("A", 1, "5")["val"] == "5"
    assert sourced("B", 1, "-2")["val"] == "3"
    assert sourced("A", 2, "7")["val"] == "5"
    stored = s.store.load(3)
    assert get_header(stored.headers, "Nats-Incr") == "2"
    assert json.loads(get_header(stored.headers, "Nats-Counter-Sources")) == {"A": {"c.x": "7"}, "B": {"c.x": "-2"}}
    # an origin's own sources header is replaced, not added to
    ack = sourced("B", 2, "0", "Nats-Counter-Sources: {\"Z\":{\"z\":\"9\"}}\r\n")
    stored = s.store.load(ack["seq"])
    assert stored.headers.count(b"Nats-Counter-Sources") == 1
    assert ack["val"] == "7"
    # a sourced value that is not an integer is refused
    assert code_of(lambda: sourced("A", 3, "seven")) == 10172
    assert s.store.state().messages == 4


def test_a_sourced_increment_on_a_stream_without_counters_is_stored_as_it_is():
    s = Stream(StreamConfig.from_json({"name": "P", "subjects": ["p.>"], "storage": "memory"}), MemoryStore())
    ack, _ = s.publish_message("p.x", incr("5"), b'{"val":"5"}', T0, sourced=True)
    assert "val" not in ack
    assert s.store.load(ack["seq"]).data == b'{"val":"5"}'
    assert code_of(lambda: s.publish_message("p.x", incr("bad"), b"", T0, sourced=True)) == 10171


def test_a_new_value_over_the_payload_limit_is_refused():
    s = counter_stream()
    big = "9" * 60_000
    last = None
    for _ in range(20):
        last = s.publish("c.a", incr(big, "Pad: " + "x" * 5000 + "\r\n"), b"", T0)
    assert last["val"].startswith("1")
    # headers near the limit plus a value as long: over 1 MiB
    assert code_of(lambda: s.publish("c.a", incr(big, "Pad: " + "x" * (1024 * 1024 - 70_000) + "\r\n"),
                                     b"", T0)) == 10054


@pytest.mark.parametrize(("block", "key", "value", "want"), [
    (b"NATS/1.0\r\nKey: 1\r\n\r\n", "Key", "22", b"NATS/1.0\r\nKey: 22\r\n\r\n"),
    (b"NATS/1.0\r\nKey:1\r\nB: 2\r\n\r\n", "Key", "x", b"NATS/1.0\r\nKey:x\r\nB: 2\r\n\r\n"),
    (b"NATS/1.0\r\nXKey: 1\r\n\r\n", "Key", "2", b"NATS/1.0\r\nXKey: 1\r\nKey: 2\r\n\r\n"),
    (b"NATS/1.0\r\nKey: 1\r\nKey: 3\r\n\r\n", "Key", "2", b"NATS/1.0\r\nKey: 2\r\nKey: 3\r\n\r\n"),
    (None, "Key", "1", b"NATS/1.0\r\nKey: 1\r\n\r\n"),
    (b"NATS/1.0\r\nKey: 1", "Key", "2", b"NATS/1.0\r\nKey: 1"),
])
def test_set_header_replaces_the_first_value_or_appends_as_nats_server(block, key, value, want):
    assert set_header(block, key, value) == want
