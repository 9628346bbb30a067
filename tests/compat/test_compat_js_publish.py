"""JetStream publish as nats-py sees it, against jetraft and nats-server.

PubAcks, Nats-Msg-Id de-duplication, the Nats-Expected-* headers, rollups, publishing
where no stream listens, and a burst of async publishes.  Comments marked
"nats-server:" record answers that surprise.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from compat_support import run
from js_support import (
    NS,
    api_error,
    error_triple,
    js_session,
)
from nats.js.api import StorageType
from nats.js.errors import NoStreamResponseError
from polling import apoll

WRONG_STREAM = (400, 10060, "expected stream does not match")
ROLLUP_REFUSED = (500, 10111, "rollup not permitted")


def wrong_last_seq(seq: int) -> tuple:
    """The error for a failed Nats-Expected-Last(-Subject)-Sequence check."""
    return 400, 10071, f"wrong last sequence: {seq}"


def wrong_last_msg_id(msg_id: str) -> tuple:
    """The error for a failed Nats-Expected-Last-Msg-Id check."""
    return 400, 10070, f"wrong last msg ID: {msg_id}"


def test_puback_fields(js_server):
    """A PubAck names the stream and the sequence; raw, it is exactly that JSON."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="P", subjects=["p.>"])
            ack = await s.js.publish("p.a", b"one")
            assert (ack.stream, ack.seq, ack.duplicate, ack.domain) == ("P", 1, None, None)
            raw = await s.nc.request("p.b", b"two", timeout=5)
            assert raw.data == b'{"stream":"P","seq":2}'
            assert raw.headers is None
            # The stream takes a request with a reply subject of any shape, and a plain
            # publish (no reply) is stored too.
            await s.nc.publish("p.c", b"three")
            await s.nc.flush()
            ack = await s.js.publish("p.d", b"four", stream="P")
            assert ack.seq == 4
            info = await s.jsm.stream_info("P")
            assert (info.state.messages, info.state.last_seq) == (4, 4)

    run(scenario)


def test_msg_id_dedupe(js_server):
    """Nats-Msg-Id: a repeat within duplicate_window is acked as duplicate and not stored."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="D", subjects=["d"])
            first = await s.js.publish("d", b"1", headers={"Nats-Msg-Id": "id-1"})
            assert (first.seq, first.duplicate) == (1, None)
            again = await s.js.publish("d", b"other payload", headers={"Nats-Msg-Id": "id-1"})
            assert (again.stream, again.seq, again.duplicate) == ("D", 1, True)
            # nats-server writes the duplicate flag with a space after the colon.
            raw = await s.nc.request("d", b"1", headers={"Nats-Msg-Id": "id-1"}, timeout=5)
            assert json.loads(raw.data) == {"stream": "D", "seq": 1, "duplicate": True}
            assert raw.data == b'{"stream":"D","seq":1,"duplicate": true}'
            other = await s.js.publish("d", b"2", headers={"Nats-Msg-Id": "id-2"})
            assert (other.seq, other.duplicate) == (2, None)
            assert (await s.js.publish("d", b"3")).seq == 3
            info = await s.jsm.stream_info("D")
            assert (info.state.messages, info.state.last_seq) == (3, 3)
            assert (await s.jsm.get_msg("D", 1)).data == b"1"

    run(scenario)


def test_dedupe_window_expires(js_server):
    """After duplicate_window the same Nats-Msg-Id is stored again."""

    async def scenario():
        async with js_session(js_server.url) as s:
            reply = await s.api("$JS.API.STREAM.CREATE.W", {"name": "W", "subjects": ["w"],
                                                            "duplicate_window": NS // 2})
            assert reply["config"]["duplicate_window"] == NS // 2
            assert (await s.js.publish("w", b"1", headers={"Nats-Msg-Id": "x"})).seq == 1
            assert (await s.js.publish("w", b"1", headers={"Nats-Msg-Id": "x"})).duplicate is True
            stored = []

            async def stored_again():
                ack = await s.js.publish("w", b"1", headers={"Nats-Msg-Id": "x"})
                stored.append(ack)
                return not ack.duplicate

            await apoll(stored_again, "the duplicate window to pass", 5, retry_on=())
            assert (stored[-1].seq, stored[-1].duplicate) == (2, None)
            assert all(a.duplicate and a.seq == 1 for a in stored[:-1])

    run(scenario)


def test_expected_stream(js_server):
    """Nats-Expected-Stream (nats-py ``stream=``): the wrong name is refused with 10060."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="E", subjects=["e"])
            assert (await s.js.publish("e", b"ok", stream="E")).seq == 1
            err = await api_error(s.js.publish("e", b"no", stream="OTHER"))
            assert error_triple(err) == WRONG_STREAM
            raw = await s.nc.request("e", b"no", headers={"Nats-Expected-Stream": "OTHER"}, timeout=5)
            assert json.loads(raw.data) == {"error": {"code": 400, "err_code": 10060,
                                                      "description": "expected stream does not match"},
                                            "stream": "E", "seq": 0}
            assert (await s.jsm.stream_info("E")).state.messages == 1

    run(scenario)


def test_expected_last_sequence(js_server):
    """Nats-Expected-Last-Sequence: only the stream's current last sequence is accepted."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="E", subjects=["e.*"])
            hdr = "Nats-Expected-Last-Sequence"
            assert (await s.js.publish("e.a", b"1", headers={hdr: "0"})).seq == 1
            err = await api_error(s.js.publish("e.a", b"x", headers={hdr: "0"}))
            assert error_triple(err) == wrong_last_seq(1)
            assert (await s.js.publish("e.b", b"2", headers={hdr: "1"})).seq == 2
            err = await api_error(s.js.publish("e.a", b"x", headers={hdr: "5"}))
            assert error_triple(err) == wrong_last_seq(2)
            assert (await s.jsm.stream_info("E")).state.messages == 2

    run(scenario)


def test_expected_last_subject_sequence(js_server):
    """Nats-Expected-Last-Subject-Sequence compares with the subject's last sequence."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="E", subjects=["e.*"])
            hdr = "Nats-Expected-Last-Subject-Sequence"
            assert (await s.js.publish("e.a", b"1", headers={hdr: "0"})).seq == 1
            assert (await s.js.publish("e.b", b"2", headers={hdr: "0"})).seq == 2
            assert (await s.js.publish("e.a", b"3", headers={hdr: "1"})).seq == 3
            err = await api_error(s.js.publish("e.a", b"x", headers={hdr: "1"}))
            # The number in the text is the subject's last sequence, not the stream's.
            assert error_triple(err) == wrong_last_seq(3)
            err = await api_error(s.js.publish("e.b", b"x", headers={hdr: "0"}))
            assert error_triple(err) == wrong_last_seq(2)
            assert (await s.js.publish("e.b", b"4", headers={hdr: "2"})).seq == 4

    run(scenario)


def test_expected_last_msg_id(js_server):
    """Nats-Expected-Last-Msg-Id compares with the Nats-Msg-Id of the stream's last message."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="E", subjects=["e"])
            await s.js.publish("e", b"1", headers={"Nats-Msg-Id": "m1"})
            ok = await s.js.publish("e", b"2", headers={"Nats-Expected-Last-Msg-Id": "m1", "Nats-Msg-Id": "m2"})
            assert ok.seq == 2
            err = await api_error(s.js.publish("e", b"x", headers={"Nats-Expected-Last-Msg-Id": "m1"}))
            assert error_triple(err) == wrong_last_msg_id("m2")
            # nats-server: a message without Nats-Msg-Id resets the last id to "", so the
            # error then ends with an empty id.
            await s.js.publish("e", b"3")
            err = await api_error(s.js.publish("e", b"x", headers={"Nats-Expected-Last-Msg-Id": "m2"}))
            assert error_triple(err) == wrong_last_msg_id("")
            assert (await s.jsm.stream_info("E")).state.messages == 3

    run(scenario)


def test_rollup_subject_and_all(js_server):
    """Nats-Rollup: "sub" keeps one message of the subject, "all" one of the stream."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="R", subjects=["r.*"], allow_rollup_hdrs=True)
            for subject in ["r.a", "r.a", "r.b", "r.a"]:
                await s.js.publish(subject, subject.encode())
            ack = await s.js.publish("r.a", b"rolled", headers={"Nats-Rollup": "sub"})
            assert ack.seq == 5
            info = await s.jsm.stream_info("R", subjects_filter=">")
            assert info.state.subjects == {"r.a": 1, "r.b": 1}
            assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (2, 3, 5)
            msg = await s.jsm.get_msg("R", subject="r.a")
            assert (msg.seq, msg.data, msg.headers) == (5, b"rolled", {"Nats-Rollup": "sub"})

            ack = await s.js.publish("r.c", b"everything", headers={"Nats-Rollup": "all"})
            info = await s.jsm.stream_info("R", subjects_filter=">")
            assert info.state.subjects == {"r.c": 1}
            assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (1, 6, 6)

            err = await api_error(s.js.publish("r.a", b"x", headers={"Nats-Rollup": "bogus"}))
            assert error_triple(err) == (500, 10111, 'rollup value invalid: "bogus"')

    run(scenario)


def test_rollup_refused_without_allow(js_server):
    """A rollup header on a stream without allow_rollup_hdrs is refused; nothing is removed."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="R", subjects=["r"])
            await s.js.publish("r", b"1")
            for value in ("sub", "all"):
                err = await api_error(s.js.publish("r", b"x", headers={"Nats-Rollup": value}))
                assert error_triple(err) == ROLLUP_REFUSED
            assert (await s.jsm.stream_info("R")).state.messages == 1

    run(scenario)


def test_publish_without_stream(js_server):
    """Publishing where no stream listens: 503 no responders -> NoStreamResponseError."""

    async def scenario():
        async with js_session(js_server.url) as s:
            with pytest.raises(NoStreamResponseError):
                await s.js.publish("nowhere", b"x")
            await s.jsm.add_stream(name="S", subjects=["somewhere"])
            with pytest.raises(NoStreamResponseError):
                await s.js.publish("nowhere", b"x")
            assert (await s.js.publish("somewhere", b"x")).seq == 1
            await s.jsm.delete_stream("S")
            with pytest.raises(NoStreamResponseError):
                await s.js.publish("somewhere", b"x")

    run(scenario)


def test_async_publish_burst(js_server):
    """500 publish_async calls are all acked, in order, with consecutive sequences."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="B", subjects=["b.*"], storage=StorageType.MEMORY)
            futures = [await s.js.publish_async(f"b.{i % 7}", b"%d" % i) for i in range(500)]
            acks = await asyncio.wait_for(asyncio.gather(*futures), 20)
            assert [a.seq for a in acks] == list(range(1, 501))
            assert {a.stream for a in acks} == {"B"}
            assert not any(a.duplicate for a in acks)
            info = await s.jsm.stream_info("B")
            assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (500, 1, 500)
            for seq in (1, 250, 500):
                msg = await s.jsm.get_msg("B", seq)
                assert (msg.subject, msg.data) == (f"b.{(seq - 1) % 7}", b"%d" % (seq - 1))

    run(scenario)


def test_headers_are_stored(js_server):
    """Headers published with a message come back with it, Nats-Msg-Id included."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="H", subjects=["h"])
            await s.js.publish("h", b"body", headers={"X-One": "1", "Nats-Msg-Id": "abc"})
            msg = await s.jsm.get_msg("H", 1)
            assert msg.headers == {"X-One": "1", "Nats-Msg-Id": "abc"}
            assert msg.data == b"body"

    run(scenario)
