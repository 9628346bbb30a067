"""Core NATS behaviour as unmodified nats-py sees it, against jetraft and nats-server."""

from __future__ import annotations

import asyncio
import re

import pytest
from compat_support import (
    assert_usable,
    close_all,
    connect,
    payloads,
    pub_and_sub,
    round_trip,
    run,
    server_info,
    take,
)
from nats.errors import NoRespondersError

SEMVER_2 = re.compile(r"^2\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


def test_connect_and_info(server):
    """nats-py connects and sees the INFO fields it relies on."""

    async def scenario():
        nc = await connect(server.url)
        try:
            assert nc.is_connected
            info = server_info(nc)
            assert isinstance(info.get("server_id"), str) and info["server_id"]
            assert isinstance(info.get("server_name"), str) and info["server_name"]
            assert SEMVER_2.match(info.get("version", "")), info.get("version")
            assert nc.connected_server_version.major == 2
            assert info.get("proto") == 1
            assert info.get("headers") is True
            assert info.get("max_payload") == 1024 * 1024 == nc.max_payload
            assert isinstance(info.get("client_id"), int)
            assert nc.client_id == info["client_id"]
        finally:
            await nc.close()
        assert nc.is_closed

    run(scenario)


def test_client_ids_are_distinct(server):
    """Two connections get different client ids."""

    async def scenario():
        a, b = await connect(server.url), await connect(server.url)
        assert a.client_id != b.client_id
        await close_all(a, b)

    run(scenario)


def test_pub_sub_in_order(server):
    """Messages published on one connection reach a subscriber on another, in order."""

    async def scenario():
        pub, sub_nc, sub = await pub_and_sub(server.url, "greet")
        sent = [f"hello {i}".encode() for i in range(20)] + [b""]
        for data in sent:
            await pub.publish("greet", data)
        await round_trip(pub, sub_nc)
        msgs = await take(sub)
        assert payloads(msgs) == sent
        assert {m.subject for m in msgs} == {"greet"}
        assert {m.reply for m in msgs} == {""}
        await close_all(pub, sub_nc)

    run(scenario)


def test_wildcards(server):
    """`*` matches one token, `>` one or more; non-matching subjects are not delivered."""

    async def scenario():
        nc = await connect(server.url)
        patterns = ["a.*", "a.>", "a.*.c", "*.b", ">", "x.>", "a.b"]
        subs = {p: await nc.subscribe(p) for p in patterns}
        for subject in ["a", "a.b", "a.b.c", "a.b.d", "b.b", "a.x.c", "x"]:
            await nc.publish(subject, subject.encode())
        await round_trip(nc)
        got = {p: [m.subject for m in await take(s)] for p, s in subs.items()}
        assert got == {
            "a.*": ["a.b"],
            "a.>": ["a.b", "a.b.c", "a.b.d", "a.x.c"],
            "a.*.c": ["a.b.c", "a.x.c"],
            "*.b": ["a.b", "b.b"],
            ">": ["a", "a.b", "a.b.c", "a.b.d", "b.b", "a.x.c", "x"],
            "x.>": [],
            "a.b": ["a.b"],
        }
        await nc.close()

    run(scenario)


def test_queue_groups(server):
    """Each message goes to exactly one member per queue group; plain subscribers get all."""

    async def scenario():
        pub = await connect(server.url)
        members = [await connect(server.url) for _ in range(5)]
        workers = [await nc.subscribe("jobs", queue="workers") for nc in members[:3]]
        others = [await nc.subscribe("jobs", queue="others") for nc in members[3:]]
        plain = await members[0].subscribe("jobs")
        await round_trip(*members)
        sent = [str(i).encode() for i in range(300)]
        for data in sent:
            await pub.publish("jobs", data)
        await round_trip(pub, *members)

        for group in (workers, others):
            per_member = [payloads(await take(s)) for s in group]
            delivered = [d for got in per_member for d in got]
            assert sorted(delivered) == sorted(sent), "each message exactly once per group"
            # 300 messages over 3 (or 2) members: every member takes a fair share.
            assert min(len(got) for got in per_member) >= len(sent) // len(group) // 4, [
                len(got) for got in per_member
            ]
        assert payloads(await take(plain)) == sent
        await close_all(pub, *members)

    run(scenario)


def test_request_reply(server):
    """nc.request gets the responder's answer through an _INBOX reply subject."""

    async def scenario():
        requester, responder = await connect(server.url), await connect(server.url)
        seen_replies = []

        async def handle(msg):
            seen_replies.append(msg.reply)
            await msg.respond(msg.data.upper())

        await responder.subscribe("svc.upper", cb=handle)
        await round_trip(responder)
        answer = await requester.request("svc.upper", b"hello", timeout=5)
        assert answer.data == b"HELLO"
        assert answer.subject.startswith("_INBOX.")
        assert seen_replies == [answer.subject]

        # Concurrent requests share one inbox subscription; each gets its own answer.
        words = [f"word{i}".encode() for i in range(25)]
        answers = await asyncio.gather(*(requester.request("svc.upper", w, timeout=5) for w in words))
        assert [a.data for a in answers] == [w.upper() for w in words]
        await close_all(requester, responder)

    run(scenario)


def test_headers_round_trip(server):
    """Headers published by nats-py arrive unchanged, with the payload, and header-only."""

    async def scenario():
        pub, sub_nc, sub = await pub_and_sub(server.url, "hdr")
        headers = {"X-One": "1", "X-Two": "two words", "Trace-Id": "abc-123"}
        await pub.publish("hdr", b"payload", headers=headers)
        await pub.publish("hdr", b"", headers={"Only": "headers"})
        await pub.publish("hdr", b"no headers")
        await round_trip(pub, sub_nc)
        first, second, third = await take(sub)
        assert (first.data, first.headers) == (b"payload", headers)
        assert (second.data, second.headers) == (b"", {"Only": "headers"})
        assert (third.data, third.headers) == (b"no headers", None)
        await close_all(pub, sub_nc)

    run(scenario)


def test_headers_request_reply(server):
    """Headers travel on requests and on responses."""

    async def scenario():
        nc = await connect(server.url)

        async def handle(msg):
            await nc.publish(msg.reply, b"ok", headers={"Echo": msg.headers["Ask"]})

        await nc.subscribe("svc.hdr", cb=handle)
        answer = await nc.request("svc.hdr", b"", timeout=5, headers={"Ask": "value 1"})
        assert (answer.data, answer.headers) == (b"ok", {"Echo": "value 1"})
        await nc.close()

    run(scenario)


def test_no_responders(server):
    """A request nobody serves fails at once with NoRespondersError, not a timeout."""

    async def scenario():
        nc = await connect(server.url)
        with pytest.raises(NoRespondersError):
            await nc.request("nobody.home", b"anyone?", timeout=10)
        await assert_usable(nc)
        await nc.close()

    run(scenario)


def test_unsubscribe_after_max(server):
    """unsubscribe(limit=N) delivers exactly N more messages, then the interest is gone."""

    async def scenario():
        pub, sub_nc = await connect(server.url), await connect(server.url)
        sub = await sub_nc.subscribe("limited")
        await sub.unsubscribe(limit=3)
        await round_trip(sub_nc)
        for i in range(6):
            await pub.publish("limited", str(i).encode())
        await round_trip(pub, sub_nc)
        assert payloads(await take(sub)) == [b"0", b"1", b"2"]
        # The server dropped the interest: a request now finds no responders.
        with pytest.raises(NoRespondersError):
            await pub.request("limited", b"", timeout=10)
        await close_all(pub, sub_nc)

    run(scenario)


def test_unsubscribe(server):
    """After unsubscribe no more messages arrive on that subscription."""

    async def scenario():
        nc = await connect(server.url)
        sub, other = await nc.subscribe("topic"), await nc.subscribe("topic")
        await nc.publish("topic", b"before")
        await round_trip(nc)
        assert payloads(await take(sub)) == [b"before"]
        await sub.unsubscribe()
        await nc.publish("topic", b"after")
        await round_trip(nc)
        assert payloads(await take(other)) == [b"before", b"after"]
        await nc.close()

    run(scenario)


def test_no_echo(server):
    """A no_echo client does not get its own messages; other clients do."""

    async def scenario():
        quiet = await connect(server.url, no_echo=True)
        loud = await connect(server.url)
        quiet_sub, loud_sub = await quiet.subscribe("chat"), await loud.subscribe("chat")
        await round_trip(quiet, loud)
        await quiet.publish("chat", b"from quiet")
        await loud.publish("chat", b"from loud")
        await round_trip(quiet, loud)
        assert payloads(await take(quiet_sub)) == [b"from loud"]
        assert sorted(payloads(await take(loud_sub))) == [b"from loud", b"from quiet"]
        await close_all(quiet, loud)

    run(scenario)
