"""The route frame codec (jetraft.protocol.route): round trips, streaming, and rejection of
malformed, oversized, unknown and wrongly-typed frames."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetraft.protocol import route as rp
from jetraft.protocol.route import (
    PING,
    PONG,
    AppFrame,
    RouteConnect,
    RouteErr,
    RouteInfo,
    RouteMsg,
    RouteParser,
    RoutePing,
    RoutePong,
    RouteProtocolError,
    RouteSub,
    RouteSubs,
    RouteUnsub,
    RouteUnsubs,
)

INFO = RouteInfo(server_name="n1", server_id="NABC", cluster="C1", tags=("az:a", "ssd"),
                 jetstream=True, listen="127.0.0.1:6222", routes=("127.0.0.1:6223", "[::1]:6224"),
                 client_url="127.0.0.1:4222")

FRAMES = [
    (rp.encode_info(INFO), INFO),
    (rp.encode_connect("ruser", "s3cret"), RouteConnect("ruser", "s3cret")),
    (rp.encode_connect(None, None), RouteConnect(None, None)),
    (rp.encode_err(rp.ERR_AUTH, "bad credentials"), RouteErr("auth", "bad credentials")),
    (PING, RoutePing()),
    (PONG, RoutePong()),
    (rp.encode_sub("$G", "orders.>"), RouteSub("$G", "orders.>", None, 1)),
    (rp.encode_sub("APP", "work", "workers", 3), RouteSub("APP", "work", "workers", 3)),
    (rp.encode_unsub("$G", "orders.>"), RouteUnsub("$G", "orders.>", None)),
    (rp.encode_unsub("APP", "work", "workers"), RouteUnsub("APP", "work", "workers")),
    (rp.encode_msg("$G", "a.b", "_INBOX.x.1", b"NATS/1.0\r\nA: b\r\n\r\n", b"payload", ("q1", "q2")),
     RouteMsg("$G", "a.b", "_INBOX.x.1", b"NATS/1.0\r\nA: b\r\n\r\n", b"payload", ("q1", "q2"))),
    (rp.encode_msg("$G", "a.b", None, None, b""), RouteMsg("$G", "a.b", None, None, b"", ())),
    (rp.encode_msg("$G", "deliver.x", None, None, b"m", (), deliver_as="orders.new"),
     RouteMsg("$G", "deliver.x", None, None, b"m", (), "orders.new")),
    (rp.encode_app("raft", b"\x00\x01\xff"), AppFrame("raft", b"\x00\x01\xff")),
    (rp.encode_info(RouteInfo("n2", "NDEF", "C1", minor=1)), RouteInfo("n2", "NDEF", "C1", minor=1)),
    (rp.encode_subs("$G", ["orders.>", "a.*.c", "x"]), RouteSubs("$G", ("orders.>", "a.*.c", "x"))),
    (rp.encode_unsubs("APP", ["orders.>"]), RouteUnsubs("APP", ("orders.>",))),
]


def raw(value: object) -> bytes:
    """A length-prefixed frame holding any msgpack ``value`` (to build bad frames)."""
    body = msgpack.packb(value, use_bin_type=True)
    return len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize(("data", "frame"), FRAMES, ids=[type(f).__name__ for _, f in FRAMES])
def test_every_frame_round_trips(data, frame):
    assert RouteParser().feed(data) == [frame]


def test_frames_split_at_every_byte_come_out_whole_and_in_order():
    stream = b"".join(data for data, _ in FRAMES)
    expected = [frame for _, frame in FRAMES]
    for cut in range(len(stream) + 1):
        parser = RouteParser()
        got = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
        assert got == expected, cut
        assert parser.buffered == 0


def test_byte_at_a_time():
    parser = RouteParser()
    got = []
    for data, _ in FRAMES[:4]:
        for i in range(len(data)):
            got += parser.feed(data[i:i + 1])
    assert got == [f for _, f in FRAMES[:4]]


def test_length_prefix_is_big_endian_and_counts_the_body():
    data = rp.encode_app("k", b"x" * 300)
    assert int.from_bytes(data[:4], "big") == len(data) - 4


@given(st.text(min_size=1, max_size=30).filter(lambda s: "." not in s),
       st.binary(max_size=200), st.one_of(st.none(), st.binary(max_size=50)),
       st.lists(st.text(min_size=1, max_size=10), max_size=4))
def test_msg_round_trips_any_content(token, payload, headers, queues):
    frame = RouteMsg("ACC", f"s.{token}", None, headers, payload, tuple(queues))
    data = rp.encode_msg(frame.account, frame.subject, None, headers, payload, queues)
    assert RouteParser().feed(data) == [frame]


def test_subjects_from_arbitrary_client_bytes_round_trip():
    subject = b"caf\xe9.\xff".decode("utf-8", "surrogateescape")  # as the client parser decodes
    [frame] = RouteParser().feed(rp.encode_msg("$G", subject, None, None, b""))
    assert frame.subject == subject
    assert frame.subject.encode("utf-8", "surrogateescape") == b"caf\xe9.\xff"


def test_oversized_length_is_refused_before_the_body_arrives():
    parser = RouteParser(max_frame=1024)
    with pytest.raises(RouteProtocolError, match="exceeds the limit of 1024"):
        parser.feed((1025).to_bytes(4, "big"))  # only the prefix: nothing buffered first


def test_default_limit_is_64_mib():
    assert RouteParser().max_frame == 64 * 1024 * 1024
    with pytest.raises(RouteProtocolError, match="exceeds"):
        RouteParser().feed((64 * 1024 * 1024 + 1).to_bytes(4, "big"))


def test_frame_at_the_limit_is_accepted():
    data = rp.encode_app("k", b"y" * 100)
    assert RouteParser(max_frame=len(data) - 4).feed(data) == [AppFrame("k", b"y" * 100)]


@pytest.mark.parametrize(("data", "error"), [
    (b"\x00\x00\x00\x00", "length 0"),
    (b"\x00\x00\x00\x01\xc1", "not a msgpack value"),                  # 0xc1 is never used
    (b"\x00\x00\x00\x01\x91", "not a msgpack value"),                  # truncated array
    (b"\x00\x00\x00\x02\x01\x02", "not a msgpack value"),              # two values in one frame
    (raw({"kind": 1}), "expected an array"),
    (raw([]), "expected an array"),
    (raw(["INFO"]), "expected an array starting with a kind"),
    (raw([99, 1]), "unknown kind 99"),
    (raw([4, "extra"]), "PING: expected 1 elements"),
    (raw([5, 1]), "PONG: expected 1 elements"),
    (raw([3, "auth"]), "ERR: expected 3 elements"),
    (raw([3, 1, "x"]), "ERR: code: expected a string"),
    (raw([2, []]), "CONNECT: body: expected a map"),
    (raw([2, {"user": 5}]), "CONNECT: user: expected a string or nil"),
    (raw([1, {"server_name": "n1", "server_id": "X", "cluster": "C"}]), "INFO: version: expected an int"),
    (raw([1, {"version": 1, "server_id": "X", "cluster": "C"}]), "INFO: server_name"),
    (raw([1, {"version": 1, "server_name": "", "server_id": "X"}]), "INFO: server_name"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "tags": "az:a"}]), "INFO: tags"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "tags": [1]}]), "INFO: tags"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "jetstream": 1}]), "INFO: jetstream"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "routes": [b"h:1"]}]), "INFO: routes"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "listen": None}]), "INFO: listen"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "client_url": 4222}]), "INFO: client_url"),
    (raw([1, {1: "x"}]), "not a msgpack value"),                       # non-string map key
    (raw([6, "$G", "a", None]), "SUB: expected 5 elements"),
    (raw([6, "$G", "a", None, 0]), "SUB: weight"),
    (raw([6, "$G", "a", "q", True]), "SUB: weight"),
    (raw([6, "$G", "a", "q", 2 ** 31]), "SUB: weight"),
    (raw([6, "", "a", None, 1]), "SUB: account"),
    (raw([6, "$G", b"a", None, 1]), "SUB: subject"),
    (raw([6, "$G", "a", "", 1]), "SUB: queue"),
    (raw([7, "$G", "a"]), "UNSUB: expected 4 elements"),
    (raw([7, "$G", None, None]), "UNSUB: subject"),
    (raw([8, "$G", "a", None, None, b"p"]), "MSG: expected 7 or 8 elements"),
    (raw([8, "$G", "a", None, None, "text payload", []]), "MSG: payload: expected bytes"),
    (raw([8, "$G", "a", None, "hdr", b"p", []]), "MSG: headers: expected bytes or nil"),
    (raw([8, "$G", "a", "", None, b"p", []]), "MSG: reply"),
    (raw([8, "$G", "a", 7, None, b"p", []]), "MSG: reply"),
    (raw([8, None, "a", None, None, b"p", []]), "MSG: account"),
    (raw([8, "$G", "", None, None, b"p", []]), "MSG: subject"),
    (raw([8, "$G", "a", None, None, b"p", "q"]), "MSG: queues"),
    (raw([8, "$G", "a", None, None, b"p", ["q", 1]]), "MSG: queues"),
    (raw([8, "$G", "a", None, None, b"p", [""]]), "MSG: queues"),
    (raw([8, "$G", "a", None, None, b"p", [], 5]), "MSG: deliver_as"),
    (raw([8, "$G", "a", None, None, b"p", [], ""]), "MSG: deliver_as"),
    (raw([9, "raft"]), "APP: expected 3 elements"),
    (raw([9, "raft", "text"]), "APP: body: expected bytes"),
    (raw([9, "", b"x"]), "APP: kind"),
    (raw([9, 3, b"x"]), "APP: kind"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "minor": "1"}]), "INFO: minor"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "minor": -1}]), "INFO: minor"),
    (raw([1, {"version": 1, "server_name": "n", "server_id": "X", "minor": True}]), "INFO: minor"),
    (raw([10, "$G"]), "SUBS: expected 3 elements"),
    (raw([10, "$G", ["a"], None]), "SUBS: expected 3 elements"),
    (raw([10, "", ["a"]]), "SUBS: account"),
    (raw([10, "$G", []]), "SUBS: subjects"),                          # never empty
    (raw([10, "$G", "a"]), "SUBS: subjects"),
    (raw([10, "$G", ["a", ""]]), "SUBS: subjects"),
    (raw([10, "$G", ["a", b"b"]]), "SUBS: subjects"),
    (raw([10, "$G", ["a", None]]), "SUBS: subjects"),
    (raw([11, "$G", []]), "UNSUBS: subjects"),
    (raw([11, None, ["a"]]), "UNSUBS: account"),
    (raw([11, "$G", ["a"], 1]), "UNSUBS: expected 3 elements"),
    (raw([12, "$G", ["a"]]), "unknown kind 12"),
])
def test_malformed_frames_are_refused_with_a_reason(data, error):
    with pytest.raises(RouteProtocolError, match=error):
        RouteParser().feed(data)


def test_a_bad_frame_after_good_ones_still_raises():
    parser = RouteParser()
    with pytest.raises(RouteProtocolError):
        parser.feed(PING + raw([99]))


def test_info_ignores_unknown_keys_and_defaults_optional_ones():
    [info] = RouteParser().feed(raw([1, {"version": 1, "server_name": "n", "server_id": "X",
                                         "cluster": "C", "future_field": {"x": 1}}]))
    assert info == RouteInfo("n", "X", "C")


def test_connect_never_shows_its_password():
    assert "s3cret" not in repr(RouteConnect("u", "s3cret"))


@given(st.binary(max_size=64))
def test_garbage_never_escapes_as_another_exception(data):
    try:
        RouteParser(max_frame=1 << 16).feed(data)
    except RouteProtocolError:
        pass


def test_the_handshake_frame_limit_refuses_a_big_announced_frame_before_buffering_it():
    parser = RouteParser(rp.MAX_HANDSHAKE_FRAME)
    with pytest.raises(RouteProtocolError, match="exceeds the limit of 65536 bytes"):
        parser.feed((rp.MAX_HANDSHAKE_FRAME + 1).to_bytes(4, "big") + b"\x91" * 1000)
    info = rp.RouteInfo(server_name="n", server_id="N1", cluster="C", listen="127.0.0.1:1",
                        routes=tuple(f"10.0.{i // 256}.{i % 256}:6222" for i in range(2000)))
    assert len(rp.encode_info(info)) < rp.MAX_HANDSHAKE_FRAME  # an INFO naming 2,000 routes fits


# ---------------------------------------------------------------- SUBS / UNSUBS (minor 1)


def test_info_without_minor_is_a_minor_0_peer_and_this_server_announces_minor_1():
    [info] = RouteParser().feed(raw([1, {"version": 1, "server_name": "n", "server_id": "X"}]))
    assert info.minor == 0 and info.version == rp.VERSION == 1
    assert rp.MINOR == 1
    body = msgpack.unpackb(rp.encode_info(RouteInfo("n", "X", "C", minor=rp.MINOR))[4:])
    assert body[1]["minor"] == 1 and body[1]["version"] == 1


_subject = st.lists(st.text(min_size=1, max_size=8).filter(lambda t: "." not in t),
                    min_size=1, max_size=4).map(".".join)


@given(st.sampled_from(["$G", "APP"]), st.lists(_subject, max_size=300), st.booleans())
def test_subs_and_unsubs_round_trip_any_subjects_in_order(account, subjects, add):
    data = (rp.encode_subs if add else rp.encode_unsubs)(account, subjects)
    frames = RouteParser().feed(data)
    assert all(type(f) is (RouteSubs if add else RouteUnsubs) and f.account == account for f in frames)
    assert [s for f in frames for s in f.subjects] == subjects
    assert (data == b"") == (not subjects)  # no frame for no subjects (a frame is never empty)


def test_a_long_list_is_cut_into_frames_of_at_most_batch_subjects_and_batch_chars():
    subjects = [f"s.{i}.x" for i in range(2 * rp.BATCH_SUBJECTS + 5)]
    frames = RouteParser().feed(rp.encode_subs("$G", subjects))
    assert [len(f.subjects) for f in frames] == [rp.BATCH_SUBJECTS, rp.BATCH_SUBJECTS, 5]
    assert [s for f in frames for s in f.subjects] == subjects
    long = ["a" * 100_000, "b" * 100_000, "c" * 100_000, "d"]  # 300,001 characters
    frames = RouteParser().feed(rp.encode_unsubs("$G", long))
    assert [f.subjects for f in frames] == [tuple(long[:2]), tuple(long[2:])]
    assert all(sum(map(len, f.subjects)) <= rp.BATCH_CHARS for f in frames)
    one = ["z" * (rp.BATCH_CHARS + 1)]  # a subject longer than the budget still goes, alone
    assert RouteParser().feed(rp.encode_subs("$G", one)) == [RouteSubs("$G", tuple(one))]


def test_a_stream_s_10000_subjects_take_three_frames_instead_of_10000():
    subjects = [f"s10000.{i}.x" for i in range(10_000)]
    batched = rp.encode_subs("$G", subjects)
    single = b"".join(rp.encode_sub("$G", s) for s in subjects)
    assert len(RouteParser().feed(batched)) == 3
    assert len(batched) < len(single) * 0.7


def test_subs_subjects_from_arbitrary_client_bytes_round_trip():
    subject = b"caf\xe9.\xff".decode("utf-8", "surrogateescape")
    [frame] = RouteParser().feed(rp.encode_subs("$G", [subject]))
    assert frame.subjects[0].encode("utf-8", "surrogateescape") == b"caf\xe9.\xff"
