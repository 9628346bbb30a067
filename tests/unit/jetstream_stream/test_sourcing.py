"""Mirrors and sources, sans-IO (jetstream/sourcing.py): the fetch answered from an
origin's store, the wire forms refusing what they do not make, the source header, and
storing what a link fetched into a mirror and a sourcing stream."""

from __future__ import annotations

import pytest

from jetraft.jetstream.model import StreamConfig
from jetraft.jetstream.sourcing import (
    FetchAnswer,
    FetchRequest,
    SourceSpec,
    answer_fetch,
    parse_source_header,
    source_positions,
    strip_source_headers,
)
from jetraft.jetstream.store import MemoryStore
from jetraft.jetstream.stream import Stream

T0 = 1_800_000_000_000_000_000


def origin(n: int = 10, retention: str = "limits") -> Stream:
    s = Stream(StreamConfig.from_json({"name": "O", "subjects": ["o.>"], "storage": "memory",
                                       "retention": retention}), MemoryStore())
    for i in range(n):
        s.publish(f"o.{'a' if i % 2 else 'b'}", None, f"m{i}".encode(), T0 + i)
    return s


def test_a_fetch_answers_matching_messages_in_order_bounded_by_count_and_bytes():
    o = origin()
    o.store.remove(4)
    got = answer_fetch(o, FetchRequest("O", 1, None, ("o.a",), max_msgs=3))
    assert [m[0] for m in got.msgs] == [2, 6, 8] and got.next_seq == 9 and got.pending == 1
    by_bytes = answer_fetch(o, FetchRequest("O", 1, None, (">",), max_bytes=1))
    assert [m[0] for m in by_bytes.msgs] == [1]            # at least one message
    by_time = answer_fetch(o, FetchRequest("O", 1, T0 + 7, (">",)))
    assert [m[0] for m in by_time.msgs] == [8, 9, 10]
    two = answer_fetch(o, FetchRequest("O", 5, None, ("o.a", "o.b")))
    assert [m[0] for m in two.msgs] == [5, 6, 7, 8, 9, 10]


def test_a_fetch_of_a_missing_or_a_recreated_origin_says_so():
    assert answer_fetch(None, FetchRequest("O", 1, None, (">",))).error["err_code"] == 10059
    other = answer_fetch(origin(), FetchRequest("O", 5, None, (">",), ident="elsewhere"), created_ns=T0)
    assert other.msgs == () and other.ident and other.ident != "elsewhere"


@pytest.mark.parametrize("item", [
    None, [], ["O", 1, None, [">"], "", 1], ["O", -1, None, [">"], "", 1, 1], ["O", 1, None, [], "", 1, 1],
    ["O", 1, "t", [">"], "", 1, 1], ["O", 1, None, [5], "", 1, 1], ["O", 1, None, [">"] * 65, "", 1, 1],
    ["O", 1, None, [">"], "", 1, 1, "C", "yes", False, "M"], ["O", 1, None, [">"], "", 1, 1, 5, True, False, "M"],
])
def test_a_malformed_fetch_request_is_refused(item):
    with pytest.raises(ValueError):
        FetchRequest.from_wire(item)


@pytest.mark.parametrize("item", [
    None, [[], 1, 0, None], [[[2, "s", None, b"", 1], [1, "s", None, b"", 1]], 3, 0, None, ""],
    [[[1, "", None, b"", 1]], 2, 0, None, ""], [[[1, "s", "h", b"", 1]], 2, 0, None, ""],
    [[], 1, 0, "error", ""],
])
def test_a_malformed_fetch_answer_is_refused(item):
    with pytest.raises(ValueError):
        FetchAnswer.from_wire(item)


def test_wire_forms_round_trip():
    req = FetchRequest("O", 3, T0, ("a", "b"), "id", consumer="C", named=True, mirror=True, asker="M")
    assert FetchRequest.from_wire(req.to_wire()) == req
    ans = answer_fetch(origin(3), FetchRequest("O", 1, None, (">",)), created_ns=T0)
    assert FetchAnswer.from_wire(ans.to_wire()) == ans


def test_the_source_header_is_read_back_and_stripped_when_sourced_again():
    assert parse_source_header("A 12 a.> > a.x IDENT") == ("A a.> >", 12, "IDENT")
    assert parse_source_header("A 12 a.>") is None and parse_source_header("A x a b") is None
    block = b"NATS/1.0\r\nNats-Stream-Source: X 1 > > x\r\nNats-Expected-Stream: X\r\nKeep: 1\r\n\r\n"
    assert strip_source_headers(block) == b"NATS/1.0\r\nKeep: 1\r\n\r\n"
    assert strip_source_headers(b"NATS/1.0\r\nNats-Stream-Source: X 1 > > x\r\n\r\n") is None


def test_a_mirror_stores_at_the_origins_sequences_and_a_source_only_once():
    o = origin(6)
    o.store.remove(3)
    msgs = answer_fetch(o, FetchRequest("O", 1, None, (">",))).msgs
    mirror = Stream(StreamConfig.from_json({"name": "M", "storage": "memory", "mirror": {"name": "O"}}), MemoryStore())
    spec = SourceSpec.parse({"name": "O"}, mirror=True)
    assert mirror.store_mirrored(msgs, spec) == 5
    assert mirror.store_mirrored(msgs, spec) == 0
    st = mirror.store.state()
    assert (st.messages, st.first_seq, st.last_seq, st.num_deleted) == (5, 1, 6, 1)
    assert mirror.store.load(6).ts == o.store.load(6).ts

    cfg = {"name": "S", "subjects": ["s"], "storage": "memory", "sources": [{"name": "O", "filter_subject": "o.a"}]}
    sourced = Stream(StreamConfig.from_json(cfg), MemoryStore())
    src = SourceSpec.parse(cfg["sources"][0], mirror=False)
    taken, refusal = sourced.store_sourced([m for m in msgs if m[1] == "o.a"], src, T0 + 100, "ID")
    assert (taken, refusal) == (3, None)
    assert sourced.store_sourced([m for m in msgs if m[1] == "o.a"], src, T0 + 101, "ID") == (0, None)
    assert source_positions(sourced.store, {src.iname}) == {src.iname: (6, "ID")}
    # the origin recreated (another identity): taken again from its start
    assert sourced.store_sourced([m for m in msgs if m[1] == "o.a"][:1], src, T0 + 102, "NEW") == (1, None)
