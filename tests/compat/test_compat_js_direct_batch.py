"""Batch and multi-last DIRECT.GET (nats-server 2.11: ``batch``, ``max_bytes``,
``start_time``, ``multi_last``, ``up_to_seq``, ``up_to_time``), side by side on jetraft and
nats-server 2.15.1 with raw requests: the same messages in the same order, the same
Nats-Num-Pending and Nats-Last-Sequence on each, the same ``204 EOB`` (with
Nats-UpTo-Sequence for multi-last), and the same refusals (408 Bad Request, 404, 413)."""

from __future__ import annotations

import json

from compat_support import run
from js_support import js_session
from nats.errors import TimeoutError as NatsTimeoutError

from jetraft import gofmt

STREAM = {"name": "D", "subjects": ["d.>"], "allow_direct": True}
#: (subject, payload) published in this order: sequences 1..8, message 4 then deleted.
MESSAGES = [("d.a", b"a1"), ("d.b", b"b1"), ("d.a", b"a2"), ("d.c", b"c1"), ("d.b", b"b2"),
            ("d.c", b"c2"), ("d.a", b"a3"), ("d.x.y", b"xy")]


async def ask(nc, body: dict | None, subject: str = "$JS.API.DIRECT.GET.D") -> list[tuple[str, dict, bytes]]:
    """Every reply to one DIRECT.GET, up to its last one (an EOB or a lone status): each as
    (status line or "", headers, payload)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, b"" if body is None else json.dumps(body).encode(), reply=inbox)
    got = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=2)
            except NatsTimeoutError:
                break
            headers = dict(msg.headers or {})
            status = headers.pop("Status", "")
            desc = headers.pop("Description", "")
            got.append((f"{status} {desc}".strip(), headers, msg.data))
            if status:          # a status ends the answer
                break
    finally:
        await sub.unsubscribe()
    return got


def seqs(replies) -> list[int]:
    return [int(h["Nats-Sequence"]) for s, h, _ in replies if not s]


def pending(replies) -> list[tuple[str, str]]:
    return [(h.get("Nats-Num-Pending", ""), h.get("Nats-Last-Sequence", "")) for _, h, _ in replies]


def test_batch_and_multi_last_direct_gets_answer_as_nats_server_does(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.D", STREAM)
            times = []
            for subject, data in MESSAGES:
                await s.js.publish(subject, data)
                times.append((await s.api("$JS.API.STREAM.MSG.GET.D", {"seq": len(times) + 1}))["message"]["time"])
            assert (await s.api("$JS.API.STREAM.MSG.DELETE.D", {"seq": 4})).get("success")

            # a batch from a sequence steps over the deleted one, then EOB
            got = await ask(s.nc, {"seq": 2, "batch": 4})
            assert seqs(got) == [2, 3, 5, 6]
            assert pending(got) == [("5", "0"), ("4", "2"), ("3", "3"), ("2", "5"), ("2", "6")]
            assert got[-1][0] == "204 EOB" and got[-1][2] == b""
            assert got[0][1]["Nats-Subject"] == "d.b" and got[0][2] == b"b1"
            # on a subject filter, to the end of the stream
            got = await ask(s.nc, {"next_by_subj": "d.a", "batch": 10})
            assert seqs(got) == [1, 3, 7] and pending(got)[-1] == ("0", "7")
            # max_bytes: at least one message, then stop (subject + payload counted)
            got = await ask(s.nc, {"seq": 1, "batch": 10, "max_bytes": 7})
            assert seqs(got) == [1, 2] and got[-1][0] == "204 EOB"
            # from a time: the first message at or after it
            got = await ask(s.nc, {"start_time": times[5], "batch": 2})
            assert seqs(got) == [6, 7]
            # no headers of the stream with no_hdr... except on the EOB
            got = await ask(s.nc, {"seq": 7, "batch": 1, "no_hdr": True})
            assert got[0] == ("", {}, b"a3") and got[-1][0] == "204 EOB"
            # a batch past the end: 404, no EOB
            assert await ask(s.nc, {"seq": 50, "batch": 3}) == [("404 Message Not Found", {}, b"")]

            # multi-last: the last message of each subject, ascending
            got = await ask(s.nc, {"multi_last": ["d.a", "d.b", "d.c"]})
            assert seqs(got) == [5, 6, 7]
            assert pending(got) == [("2", "0"), ("1", "5"), ("0", "6"), ("0", "7")]
            assert got[-1][0] == "204 EOB" and got[-1][1]["Nats-UpTo-Sequence"] == "8"
            got = await ask(s.nc, {"multi_last": ["d.>"], "up_to_seq": 3})
            assert seqs(got) == [2, 3] and got[-1][1]["Nats-UpTo-Sequence"] == "3"
            got = await ask(s.nc, {"multi_last": ["d.*"], "up_to_time": times[5]})   # before message 6
            assert seqs(got) == [3, 5] and got[-1][1]["Nats-UpTo-Sequence"] == "5"
            got = await ask(s.nc, {"multi_last": ["d.>"], "batch": 2})
            assert seqs(got) == [5, 6] and pending(got)[-1] == ("2", "6")
            got = await ask(s.nc, {"multi_last": ["d.>"], "seq": 7})
            assert seqs(got) == [7, 8]
            assert await ask(s.nc, {"multi_last": ["none.>"]}) == [("404 No Results", {}, b"")]
            early = gofmt.format_time(gofmt.parse_time(times[0]) - 1)
            assert await ask(s.nc, {"multi_last": ["d.>"], "up_to_time": early}) == [("404 No Results", {}, b"")]

            # what does not go together
            for body in ({"batch": 5}, {"up_to_seq": 3}):
                assert await ask(s.nc, body) == [("408 Empty Request", {}, b"")], body
            for body in ({"seq": 1, "last_by_subj": "d.a"}, {"seq": 1, "start_time": times[0]},
                         {"last_by_subj": "d.a", "batch": 2}, {"last_by_subj": "d.a", "multi_last": ["d.a"]},
                         {"next_by_subj": "d.a", "multi_last": ["d.a"]},
                         {"multi_last": ["d.a"], "up_to_seq": 2, "up_to_time": times[0]}):
                assert await ask(s.nc, body) == [("408 Bad Request", {}, b"")], body
            assert await ask(s.nc, {"batch": 2}, "$JS.API.DIRECT.GET.D.d.a") == [("408 Bad Request", {}, b"")]

    run(scenario)


def test_a_multi_last_get_of_more_than_1024_subjects_is_too_many(js_server):
    async def scenario():
        async with js_session(js_server.url) as s:
            assert "error" not in await s.api("$JS.API.STREAM.CREATE.D", STREAM)
            for i in range(1025):
                await s.nc.publish(f"d.s{i}", b"x")
            await s.js.publish("d.last", b"x")
            assert await ask(s.nc, {"multi_last": ["d.*"]}) == [("413 Too Many Results", {}, b"")]
            got = await ask(s.nc, {"multi_last": ["d.s1", "d.s2"]})
            assert seqs(got) == [2, 3]

    run(scenario)
