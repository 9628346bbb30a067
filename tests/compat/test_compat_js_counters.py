"""Counter streams (nats-server 2.12, ADR-49, API level 2), side by side on jetraft and
nats-server 2.15.1: ``allow_msg_counter`` and the ``Nats-Incr`` header; the new value in the
PubAck (``"val"``) and in the stored message (``{"val":"..."}``), big integers, nats-server's
errors and config checks, counters sourced into a counter stream (``Nats-Counter-Sources``),
and on three servers a counter whose final value is the sum of its acknowledged increments
across a leader step-down and a SIGKILL (nats-server server/stream.go processJetStreamMsg).
"""

from __future__ import annotations

import base64
import json

from compat_support import run
from js_support import across_step_down_and_sigkill, asked_again, js_session
from polling import apoll


def incr_of(value: str | int, **headers: str) -> dict[str, str]:
    return {"Nats-Incr": str(value), **headers}


async def publish(s, subject: str, data: bytes = b"", **headers: str) -> dict:
    msg = await s.nc.request(subject, data, timeout=5, headers=headers or None)
    return json.loads(msg.data)


async def last_of(s, stream: str, subject: str) -> tuple[dict, dict]:
    """(body, headers) of the last message on ``subject`` as STREAM.MSG.GET returns it."""
    got = await s.api(f"$JS.API.STREAM.MSG.GET.{stream}", {"last_by_subj": subject})
    assert "message" in got, got
    message = got["message"]
    raw = base64.b64decode(message.get("hdrs", "")).decode()
    headers = dict(line.split(": ", 1) for line in raw.split("\r\n")[1:] if ": " in line)
    return json.loads(base64.b64decode(message["data"])), headers


def test_increments_add_up_and_the_value_is_in_the_puback_and_the_message(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            made = await s.api("$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"],
                                                           "allow_msg_counter": True})
            assert "error" not in made, made
            assert made["config"]["allow_msg_counter"] is True
            assert made["config"]["metadata"]["_nats.req.level"] == "2"
            acks = [await publish(s, "c.a", **incr_of(v)) for v in (1, 5, "-2", "+10", "0007")]
            assert [a["val"] for a in acks] == ["1", "6", "4", "14", "21"]
            assert acks[0] == {"stream": "C", "seq": 1, "val": "1"}
            big = "1" + "0" * 40
            assert (await publish(s, "c.b", **incr_of(big)))["val"] == big
            assert (await publish(s, "c.b", **incr_of("-" + big + "1")))["val"] == "-9" + "0" * 39 + "1"
            body, headers = await last_of(s, "C", "c.a")
            assert body == {"val": "21"}
            assert headers["Nats-Incr"] == "0007"        # stored as published
            again = await publish(s, "c.a", **incr_of(3, **{"Nats-Msg-Id": "once"}))
            dup = await publish(s, "c.a", **incr_of(3, **{"Nats-Msg-Id": "once"}))
            assert again["val"] == "24" and dup == {"stream": "C", "seq": again["seq"], "duplicate": True}
            assert (await last_of(s, "C", "c.a"))[0] == {"val": "24"}
            # a subject of its own starts at 0
            assert (await publish(s, "c.z", **incr_of(0)))["val"] == "0"
            # the raw PubAck as nats-server writes it
            raw = await s.nc.request("c.q", b"", timeout=5, headers=incr_of(2))
            assert raw.data == b'{"stream":"C","seq":10,"val":"2"}', raw.data
            info = await s.api("$JS.API.STREAM.INFO.C")
            assert info["state"]["messages"] == 10
    run(scenario)


def test_increments_that_are_refused_change_nothing(js_server):
    def err(ack: dict) -> tuple[int, str]:
        return ack["error"]["err_code"], ack["error"]["description"]

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.api("$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"], "allow_msg_counter": True})
            await s.api("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]})
            assert (await publish(s, "c.a", **incr_of(5)))["val"] == "5"
            invalid = (10171, "message counter increment is invalid")
            for bad in ("abc", "1.5", "1e3", "0x10", "1_000", "+", "--1", " 1 2"):
                assert err(await publish(s, "c.a", **incr_of(bad))) == invalid, bad
            assert err(await publish(s, "c.a", b"body", **incr_of(1))) == (10170, "message counter has payload")
            assert err(await publish(s, "c.a", b"")) == (10169, "message counter increment is missing")
            assert err(await publish(s, "c.a", b"x", **{"Nats-Msg-Id": "m"})) == \
                (10169, "message counter increment is missing")
            for header, value in (("Nats-Rollup", "sub"), ("Nats-Expected-Last-Sequence", "1"),
                                  ("Nats-Expected-Stream", "C"), ("Nats-Expected-Last-Msg-Id", "x"),
                                  ("Nats-Expected-Last-Subject-Sequence", "1")):
                assert err(await publish(s, "c.a", **incr_of(1, **{header: value}))) == invalid, header
            # a stream without counters refuses an increment, and a malformed one as malformed
            assert err(await publish(s, "p.a", **incr_of(1))) == (10168, "message counters is disabled")
            assert err(await publish(s, "p.a", **incr_of("x"))) == invalid
            assert (await publish(s, "c.a", **incr_of(1)))["val"] == "6"
            info = await s.api("$JS.API.STREAM.INFO.C")
            assert info["state"]["messages"] == 2
            assert (await s.api("$JS.API.STREAM.INFO.P"))["state"]["messages"] == 0
    run(scenario)


def test_counter_configs_nats_server_refuses(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            def bad(body: dict) -> dict:
                return {"name": "X", "subjects": ["x"], "allow_msg_counter": True, **body}
            for body, text in (({"discard": "new"}, "counter stream cannot use discard new"),
                               ({"allow_msg_ttl": True}, "counter stream cannot use message TTLs"),
                               ({"retention": "workqueue"}, "counter stream can only use limits retention"),
                               ({"retention": "interest"}, "counter stream can only use limits retention")):
                got = await s.api("$JS.API.STREAM.CREATE.X", bad(body))
                assert got["error"]["err_code"] == 10052, got
                assert got["error"]["description"] == text, got
            await s.api("$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o"], "allow_msg_counter": True})
            mirrored = await s.api("$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"},
                                                               "allow_msg_counter": True})
            assert mirrored["error"]["err_code"] == 10173, mirrored
            off = await s.api("$JS.API.STREAM.UPDATE.O", {"name": "O", "subjects": ["o"]})
            assert off["error"]["description"] == \
                "stream configuration update can not change message counter setting", off
            await s.api("$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p"]})
            on = await s.api("$JS.API.STREAM.UPDATE.P", {"name": "P", "subjects": ["p"], "allow_msg_counter": True})
            assert on["error"]["err_code"] == 10052, on
    run(scenario)


def test_counters_sourced_into_a_counter_stream_add_up(js_server):
    """Two counter streams sourced into a third: its value on a subject is the sum of the
    origins' values, and ``Nats-Counter-Sources`` holds the last value from each."""
    async def scenario():
        async with js_session(js_server.url) as s:
            for name in ("A", "B"):
                await s.api(f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.>"],
                                                               "allow_msg_counter": True})
            made = await s.api("$JS.API.STREAM.CREATE.SUM", {
                "name": "SUM", "allow_msg_counter": True,
                "sources": [{"name": "A", "subject_transforms": [{"src": "a.>", "dest": "n.>"}]},
                            {"name": "B", "subject_transforms": [{"src": "b.>", "dest": "n.>"}]}]})
            assert "error" not in made, made
            for v in (1, 2, 3):
                await publish(s, "a.x", **incr_of(v))
            for v in (10, -4):
                await publish(s, "b.x", **incr_of(v))

            async def total():
                got = await s.api("$JS.API.STREAM.MSG.GET.SUM", {"last_by_subj": "n.x"})
                return "message" in got and json.loads(base64.b64decode(got["message"]["data"])) == {"val": "12"}
            await apoll(total, "SUM holds A's 6 plus B's 6", timeout=20)
            _, headers = await last_of(s, "SUM", "n.x")
            assert json.loads(headers["Nats-Counter-Sources"]) == {"A": {"a.x": "6"}, "B": {"b.x": "6"}}
            await publish(s, "a.x", **incr_of(100))

            async def more():
                body, headers = await last_of(s, "SUM", "n.x")
                return body == {"val": "112"} and headers["Nats-Incr"] == "100"
            await apoll(more, "SUM takes the difference of A's new value", timeout=20)
    run(scenario)


def test_a_counter_is_the_sum_of_its_acknowledged_increments_across_step_down_and_sigkill(
        formed_cluster, server_kind):
    """Three servers, an R3 counter stream: increments 1..30 (each with a message id, so a
    publish asked again is counted once) through a step-down and a SIGKILL of its leader;
    the value every server holds is the sum of the acknowledged increments."""
    with formed_cluster(server_kind, "counter", 3, jetstream=True) as c:
        acked: list[int] = []

        async def publish_one(s, k: int, _phase: str) -> None:
            ack = await asked_again(lambda: s.js.publish("n.total", b"", headers=incr_of(k + 1, **{
                "Nats-Msg-Id": f"i{k}"})), f"increment {k}")
            assert ack.seq > 0
            acked.append(k + 1)

        async def check(s, _phase: str) -> None:
            async def summed():
                got = await asked_again(lambda: s.api("$JS.API.STREAM.MSG.GET.N", {"last_by_subj": "n.total"}),
                                        "the counter")
                return "message" in got and \
                    json.loads(base64.b64decode(got["message"]["data"])) == {"val": str(sum(acked))}
            await apoll(summed, "the counter holds the sum of the acknowledged increments", timeout=30)

        across_step_down_and_sigkill(
            c, [{"name": "N", "subjects": ["n.>"], "allow_msg_counter": True, "num_replicas": 3}],
            ("N",), "N", publish_one, check)
