"""JetStream consumers as nats-py sees them, against jetraft and nats-server.

Pull (fetch, no_wait, expires) and push (durable, deliver group, ordered, flow control
and heartbeats) consumers; ack policies and every ack kind; redelivery, max_deliver,
backoff, max_ack_pending; deliver policies and filters; consumer info and message
metadata; the consumer API; inactive ephemerals.  Comments marked "nats-server:" record
answers that surprise.  Waiting for a server timer is done with server-side expiries
(fetch timeouts) and deadline polls, never a bare sleep.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import time

import nats.errors
import pytest
from compat_support import round_trip, run
from js_support import (
    CONSUMER_CREATE_RESPONSE,
    NS,
    Session,
    api_error,
    error_triple,
    js_session,
)
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError, ServiceUnavailableError
from polling import apoll

CONSUMER_NOT_FOUND = (404, 10014, "consumer not found")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")


async def stream_with(s: Session, count: int, subjects=("c.a", "c.b"), name="C") -> None:
    """A stream ``name`` on ``c.>`` holding ``count`` messages b"0".. cycling over ``subjects``."""
    await s.jsm.add_stream(name=name, subjects=["c.>"])
    for i in range(count):
        await s.js.publish(subjects[i % len(subjects)], b"%d" % i)


def seqs(msgs: list[Msg]) -> list[int]:
    """The stream sequences of JetStream messages."""
    return [m.metadata.sequence.stream for m in msgs]


async def no_more(psub, timeout: float = 0.5) -> None:
    """Assert a pull subscription gets nothing within ``timeout`` (a server-side expiry), then
    wait until the server has expired that pull request: nats-py gives up at ``timeout`` after
    sending it, the server a little later (``timeout`` after receiving it), and a message
    published in between is rightly delivered to the abandoned request."""
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(1, timeout=timeout)
    await apoll(lambda: _none_waiting(psub), "the abandoned pull request to expire", 5, retry_on=())


async def _none_waiting(psub) -> bool:
    return (await psub.consumer_info()).num_waiting == 0


async def durable_pull(s: Session, name: str, **config):
    """Create durable pull consumer ``name`` (explicit acks) on stream C; bind a pull subscription."""
    await s.jsm.add_consumer("C", durable_name=name, ack_policy=AckPolicy.EXPLICIT, **config)
    return await s.js.pull_subscribe_bind(name, stream="C")


async def fetch_all(psub, count: int, timeout: float = 5.0) -> list[Msg]:
    """Fetch until ``count`` messages came (nats-py's fetch may return a partial batch)."""
    got: list[Msg] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"only {len(got)} of {count} messages within {timeout}s: {seqs(got)}")
        try:
            got += await psub.fetch(count - len(got), timeout=remaining)
        except asyncio.TimeoutError:  # see first_batch in test_deliver_policies
            continue
    return got


async def next_request(s: Session, stream: str, consumer: str, body: dict, count: int = 1) -> list[Msg]:
    """Send a raw CONSUMER.MSG.NEXT with ``body``; return the first ``count`` replies."""
    inbox = s.nc.new_inbox()
    sub = await s.nc.subscribe(inbox)
    await s.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", json.dumps(body).encode(), reply=inbox)
    got = [await sub.next_msg(timeout=5) for _ in range(count)]
    await sub.unsubscribe()
    return got


# --------------------------------------------------------------------------- pull


def test_pull_durable_fetch_batches(js_server):
    """A durable pull consumer hands out batches in order; acks move the ack floor."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 10)
            psub = await s.js.pull_subscribe("c.>", durable="D", stream="C")
            first = await psub.fetch(4, timeout=5)
            assert [m.data for m in first] == [b"0", b"1", b"2", b"3"]
            assert seqs(first) == [1, 2, 3, 4]
            assert [m.metadata.sequence.consumer for m in first] == [1, 2, 3, 4]
            assert [m.metadata.num_pending for m in first] == [9, 8, 7, 6]
            assert [m.subject for m in first] == ["c.a", "c.b", "c.a", "c.b"]
            for m in first:
                await m.ack()
            rest = await psub.fetch(10, timeout=1)
            assert seqs(rest) == [5, 6, 7, 8, 9, 10]
            for m in rest:
                await m.ack_sync()
            info = await psub.consumer_info()
            assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (10, 10)
            assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (10, 10)
            assert (info.num_pending, info.num_ack_pending, info.num_redelivered) == (0, 0, 0)
            await no_more(psub)

            # A second pull subscription on the same durable resumes where it stopped.
            await s.js.publish("c.a", b"10")
            again = await s.js.pull_subscribe("c.>", durable="D", stream="C")
            msgs = await again.fetch(1, timeout=5)
            assert (seqs(msgs), msgs[0].metadata.sequence.consumer) == ([11], 11)

    run(scenario)


def test_pull_ephemeral(js_server):
    """pull_subscribe without a durable makes a consumer with no durable_name."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 4)
            psub = await s.js.pull_subscribe("c.b")
            info = await psub.consumer_info()
            assert info.config.durable_name is None
            assert info.config.filter_subject == "c.b"
            assert info.num_pending == 2
            # nats-server: a named non-durable consumer gets inactive_threshold 5 s by default.
            assert info.config.inactive_threshold == 5.0
            msgs = await psub.fetch(2, timeout=5)
            assert seqs(msgs) == [2, 4]
            assert [m.metadata.sequence.consumer for m in msgs] == [1, 2]
            assert {m.metadata.consumer for m in msgs} == {info.name}

    run(scenario)


def test_fetch_timeout_without_messages(js_server):
    """fetch on an empty stream raises a timeout once its expiry passes: nats.errors.TimeoutError,
    or asyncio's own when the 0.5 s run out between nats-py's no-wait probe and its waiting
    request on a busy machine (nats-py js/client.py _fetch_n; see test_deliver_policies)."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="C", subjects=["c.>"])
            psub = await s.js.pull_subscribe("c.>", durable="D")
            for batch in (1, 5):
                start = time.monotonic()
                with pytest.raises(asyncio.TimeoutError):     # nats.errors.TimeoutError is one
                    await psub.fetch(batch, timeout=0.5)
                assert 0.3 < time.monotonic() - start < 3
            # A message published while a fetch waits is handed to it.
            fetch = asyncio.ensure_future(psub.fetch(1, timeout=5))
            await apoll(lambda: _waiting(s, "C", "D"), "the pull request to be waiting", 5, retry_on=())
            await s.js.publish("c.x", b"late")
            msgs = await fetch
            assert [m.data for m in msgs] == [b"late"]

    run(scenario)


async def _waiting(s: Session, stream: str, consumer: str) -> bool:
    """True when the consumer has a pull request waiting."""
    return (await s.jsm.consumer_info(stream, consumer)).num_waiting > 0


def test_pull_no_wait_answers_404(js_server):
    """A no_wait pull request with nothing pending answers status 404 "No Messages"."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            await s.jsm.add_consumer("C", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
            [msg] = await next_request(s, "C", "D", {"batch": 1, "no_wait": True})
            assert (msg.data, msg.subject) == (b"0", "c.a")
            assert msg.reply.startswith("$JS.ACK.C.D.1.1.1.")
            [status] = await next_request(s, "C", "D", {"batch": 1, "no_wait": True})
            assert status.data == b""
            assert (status.headers["Status"], status.headers["Description"]) == ("404", "No Messages")
            # nats-py's fetch turns the 404 into a timeout, not an error.
            psub = await s.js.pull_subscribe_bind("D", stream="C")
            await no_more(psub)

    run(scenario)


def test_pull_expires_answers_408(js_server):
    """A pull request that expires answers 408 "Request Timeout" with what it still wanted."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            await s.jsm.add_consumer("C", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
            msg, status = await next_request(s, "C", "D", {"batch": 3, "expires": NS // 5}, count=2)
            assert msg.data == b"0"
            assert status.data == b""
            # nats-server names the unfilled part of the batch (2 of 3) and 0 bytes.
            assert status.headers == {"Status": "408", "Description": "Request Timeout",
                                      "Nats-Pending-Messages": "2", "Nats-Pending-Bytes": "0"}
            [status] = await next_request(s, "C", "D", {"batch": 1, "expires": NS // 5})
            assert (status.headers["Status"], status.headers["Nats-Pending-Messages"]) == ("408", "1")

    run(scenario)


def test_pull_requests_on_missing_consumer(js_server):
    """Fetching from a deleted consumer fails; its info is 10014."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            psub = await s.js.pull_subscribe("c.>", durable="D")
            assert await s.jsm.delete_consumer("C", "D") is True
            err = await api_error(s.jsm.consumer_info("C", "D"))
            assert isinstance(err, NotFoundError) and error_triple(err) == CONSUMER_NOT_FOUND
            # Nobody answers MSG.NEXT for a missing consumer: no responders, which nats-py
            # turns into ServiceUnavailableError.
            with pytest.raises(ServiceUnavailableError):
                await psub.fetch(1, timeout=0.5)

    run(scenario)


# --------------------------------------------------------------------------- push


def test_push_durable_subscribe(js_server):
    """js.subscribe with a durable: messages arrive on a deliver inbox; push_bound is true."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 5)
            sub = await s.js.subscribe("c.>", durable="P", manual_ack=True)
            msgs = [await sub.next_msg(timeout=5) for _ in range(5)]
            assert [m.data for m in msgs] == [b"%d" % i for i in range(5)]
            assert seqs(msgs) == [1, 2, 3, 4, 5]
            info = await s.jsm.consumer_info("C", "P")
            assert info.push_bound is True
            assert info.config.deliver_subject.startswith("_INBOX.")
            assert info.num_ack_pending == 5
            for m in msgs:
                await m.ack()
            await s.js.publish("c.z", b"live")
            live = await sub.next_msg(timeout=5)
            assert (live.data, live.metadata.sequence.stream) == (b"live", 6)
            await live.ack_sync()

            async def acked():
                i = await s.jsm.consumer_info("C", "P")
                assert i.ack_floor.stream_seq == 6, i
                return i
            info = await apoll(acked, "acks to land", 5, retry_on=(AssertionError,))
            assert info.num_ack_pending == 0

    run(scenario)


def test_push_callback_auto_ack(js_server):
    """js.subscribe with a callback acks each message after the callback returns."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 6)
            got = []

            async def cb(msg):
                got.append(msg.data)

            await s.js.subscribe("c.>", durable="CB", cb=cb)
            await apoll(lambda: len(got) == 6, "six messages", 5)
            assert got == [b"%d" % i for i in range(6)]

            async def auto_acked():
                i = await s.jsm.consumer_info("C", "CB")
                assert i.num_ack_pending == 0, i
                return i
            info = await apoll(auto_acked, "auto-acks", 5, retry_on=(AssertionError,))
            assert info.ack_floor.stream_seq == 6

    run(scenario)


def test_push_deliver_group(js_server):
    """Queue subscribers (deliver_group) share a push consumer: each message once."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="C", subjects=["c.>"])
            subs = [await s.js.subscribe("c.>", queue="workers", manual_ack=True) for _ in range(3)]
            info = await s.jsm.consumer_info("C", "workers")
            assert info.config.deliver_group == "workers"
            assert info.config.durable_name == "workers"
            for i in range(60):
                await s.js.publish("c.x", b"%d" % i)
            await round_trip(s.nc)

            async def delivered():
                i = await s.jsm.consumer_info("C", "workers")
                assert i.delivered.stream_seq == 60, i
                return i
            info = await apoll(delivered, "all delivered", 5, retry_on=(AssertionError,))
            await round_trip(s.nc)
            got = []
            for sub in subs:
                while sub.pending_msgs:
                    got.append(await sub.next_msg(timeout=1))
            assert sorted(int(m.data) for m in got) == list(range(60))
            assert all(m.metadata.num_delivered == 1 for m in got)

    run(scenario)


def test_ordered_consumer(js_server):
    """ordered_consumer=True: every message in stream order; the consumer is ack none, R1, memory."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 20)
            sub = await s.js.subscribe("c.>", ordered_consumer=True)
            msgs = [await sub.next_msg(timeout=5) for _ in range(20)]
            assert seqs(msgs) == list(range(1, 21))
            assert [m.metadata.sequence.consumer for m in msgs] == list(range(1, 21))
            info = await sub.consumer_info()
            assert info.config.ack_policy == AckPolicy.NONE
            assert info.config.flow_control is True
            assert info.config.max_deliver == 1
            assert info.config.mem_storage is True
            assert info.config.durable_name is None
            assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == 20

    run(scenario)


def test_flow_control_and_heartbeats(js_server):
    """flow_control + idle_heartbeat: large bursts arrive whole; idle consumers send status 100."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await s.jsm.add_stream(name="C", subjects=["c.>"])
            payload = b"x" * 16 * 1024
            for _ in range(200):
                await s.js.publish("c.big", payload)
            sub = await s.js.subscribe("c.>", durable="FC", flow_control=True, idle_heartbeat=0.5,
                                       manual_ack=True)
            msgs = [await sub.next_msg(timeout=5) for _ in range(200)]
            assert seqs(msgs) == list(range(1, 201))
            assert all(m.data == payload for m in msgs)

            # A raw push consumer shows the heartbeat itself.
            inbox = s.nc.new_inbox()
            raw = await s.nc.subscribe(inbox)
            await s.jsm.add_consumer("C", durable_name="HB", deliver_subject=inbox, flow_control=True,
                                     idle_heartbeat=0.2, deliver_policy=DeliverPolicy.LAST)
            last = await raw.next_msg(timeout=5)
            assert last.metadata.sequence.stream == 200
            await last.ack()
            hb = await raw.next_msg(timeout=5)
            assert hb.data == b"" and hb.reply == ""
            assert hb.headers["Status"] == "100"
            assert hb.headers["Description"] == "Idle Heartbeat"
            # nats-server names the last delivered sequences in the heartbeat.
            assert hb.headers["Nats-Last-Consumer"] == "1"
            assert hb.headers["Nats-Last-Stream"] == "200"

    run(scenario)


# --------------------------------------------------------------------------- acks


def test_ack_policy_explicit_all_none(js_server):
    """explicit acks one message, all acks every message up to it, none needs no ack."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 5)
            for name, policy in (("EX", AckPolicy.EXPLICIT), ("ALL", AckPolicy.ALL), ("NONE", AckPolicy.NONE)):
                await s.jsm.add_consumer("C", durable_name=name, ack_policy=policy)

            ex = await s.js.pull_subscribe_bind("EX", stream="C")
            msgs = await ex.fetch(5, timeout=5)
            await msgs[2].ack_sync()
            info = await s.jsm.consumer_info("C", "EX")
            # An explicit ack of seq 3 does not move the floor past the unacked 1 and 2.
            assert (info.num_ack_pending, info.ack_floor.stream_seq) == (4, 0)
            await msgs[0].ack_sync()
            info = await s.jsm.consumer_info("C", "EX")
            assert (info.num_ack_pending, info.ack_floor.stream_seq) == (3, 1)

            al = await s.js.pull_subscribe_bind("ALL", stream="C")
            msgs = await al.fetch(5, timeout=5)
            await msgs[2].ack_sync()
            info = await s.jsm.consumer_info("C", "ALL")
            assert (info.num_ack_pending, info.ack_floor.stream_seq, info.ack_floor.consumer_seq) == (2, 3, 3)

            no = await s.js.pull_subscribe_bind("NONE", stream="C")
            msgs = await no.fetch(5, timeout=5)
            assert seqs(msgs) == [1, 2, 3, 4, 5]
            info = await s.jsm.consumer_info("C", "NONE")
            assert (info.num_ack_pending, info.ack_floor.stream_seq, info.delivered.stream_seq) == (0, 5, 5)
            # nats-server: ack_policy none leaves ack_wait and max_ack_pending out of the config.
            raw = await s.api("$JS.API.CONSUMER.INFO.C.NONE")
            assert "ack_wait" not in raw["config"] and "max_ack_pending" not in raw["config"]

    run(scenario)


def test_ack_sync_answers(js_server):
    """ack_sync waits for the server's (empty) answer to the ack."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            psub = await s.js.pull_subscribe("c.>", durable="D")
            [msg] = await psub.fetch(1, timeout=5)
            reply = await msg.ack_sync(timeout=5)
            assert reply.data == b""
            assert msg.is_acked
            info = await s.jsm.consumer_info("C", "D")
            assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, 1)

    run(scenario)


def test_nak_redelivers_now_and_with_delay(js_server):
    """nak() redelivers at once (num_delivered 2); nak(delay=) not before the delay."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            psub = await s.js.pull_subscribe("c.>", durable="D")
            [msg] = await psub.fetch(1, timeout=5)
            assert msg.metadata.num_delivered == 1
            await msg.nak()
            [again] = await psub.fetch(1, timeout=5)
            assert (again.metadata.sequence.stream, again.metadata.num_delivered) == (1, 2)
            assert again.metadata.sequence.consumer == 2
            nak_at = time.monotonic()
            await again.nak(delay=1.0)
            await no_more(psub, timeout=0.5)
            [third] = await psub.fetch(1, timeout=5)
            assert time.monotonic() - nak_at >= 0.9
            assert third.metadata.num_delivered == 3
            await third.ack_sync()
            info = await s.jsm.consumer_info("C", "D")
            assert (info.num_redelivered, info.num_ack_pending) == (0, 0)

    run(scenario)


def test_redelivery_after_ack_wait(js_server):
    """An unacked message comes back after ack_wait with num_delivered 2."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 2)
            psub = await durable_pull(s, "D", ack_wait=0.5)
            msgs = await psub.fetch(2, timeout=5)
            await msgs[1].ack()
            [again] = await psub.fetch(1, timeout=5)
            assert (again.metadata.sequence.stream, again.metadata.num_delivered) == (1, 2)
            assert again.metadata.sequence.consumer == 3
            assert again.data == b"0"
            info = await s.jsm.consumer_info("C", "D")
            assert (info.num_redelivered, info.num_ack_pending) == (1, 1)
            assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (3, 2)
            await again.ack_sync()
            info = await s.jsm.consumer_info("C", "D")
            assert (info.num_redelivered, info.num_ack_pending, info.ack_floor.stream_seq) == (0, 0, 2)

    run(scenario)


def test_in_progress_extends_ack_wait(js_server):
    """in_progress() restarts the ack timer: no redelivery at the original deadline."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            psub = await durable_pull(s, "D", ack_wait=1.0)
            [msg] = await psub.fetch(1, timeout=5)
            await no_more(psub, timeout=0.6)
            await msg.in_progress()
            touched = time.monotonic()
            # Past the original 1 s deadline: still nothing.
            await no_more(psub, timeout=0.6)
            [again] = await psub.fetch(1, timeout=5)
            assert time.monotonic() - touched >= 0.9
            assert again.metadata.num_delivered == 2

    run(scenario)


def test_term_stops_redelivery(js_server):
    """term() acknowledges for good: never redelivered, not pending."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 2)
            psub = await durable_pull(s, "D", ack_wait=0.3)
            msgs = await psub.fetch(2, timeout=5)
            await msgs[0].term()
            await msgs[1].ack()
            await no_more(psub, timeout=0.8)
            info = await s.jsm.consumer_info("C", "D")
            assert (info.num_ack_pending, info.num_redelivered, info.ack_floor.stream_seq) == (0, 0, 2)

    run(scenario)


def test_max_deliver(js_server):
    """After max_deliver deliveries a message is not delivered again."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            psub = await durable_pull(s, "D", ack_wait=0.3, max_deliver=2)
            [one] = await psub.fetch(1, timeout=5)
            [two] = await psub.fetch(1, timeout=5)
            assert [one.metadata.num_delivered, two.metadata.num_delivered] == [1, 2]
            await no_more(psub, timeout=1.0)
            info = await s.jsm.consumer_info("C", "D")
            assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (2, 1)
            # A new message is still delivered.
            await s.js.publish("c.a", b"next")
            [nxt] = await psub.fetch(1, timeout=5)
            assert (nxt.metadata.sequence.stream, nxt.metadata.num_delivered) == (2, 1)

    run(scenario)


def test_backoff(js_server):
    """backoff sets each redelivery's delay; nats-server reports ack_wait = backoff[0]."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            info = await s.jsm.add_consumer("C", durable_name="D", ack_policy=AckPolicy.EXPLICIT,
                                            backoff=[0.2, 1.5], max_deliver=3)
            assert info.config.backoff == [0.2, 1.5]
            # nats-server: ack_wait defaults to the first backoff step.
            assert info.config.ack_wait == 0.2
            psub = await s.js.pull_subscribe_bind("D", stream="C")
            [first] = await psub.fetch(1, timeout=5)
            t1 = time.monotonic()
            [second] = await psub.fetch(1, timeout=5)
            t2 = time.monotonic()
            assert second.metadata.num_delivered == 2
            assert t2 - t1 < 1.2, "the first redelivery follows backoff[0] (0.2 s)"
            await no_more(psub, timeout=0.8)
            [third] = await psub.fetch(1, timeout=5)
            assert third.metadata.num_delivered == 3
            assert time.monotonic() - t2 >= 1.3, "the second redelivery follows backoff[1] (1.5 s)"

            # backoff longer than max_deliver allows is refused.
            err = await api_error(s.jsm.add_consumer("C", durable_name="BAD", ack_policy=AckPolicy.EXPLICIT,
                                                     backoff=[1, 2, 3], max_deliver=2))
            assert error_triple(err) == (400, 10116, "max deliver is required to be > length of backoff values")

    run(scenario)


def test_max_ack_pending(js_server):
    """With max_ack_pending 3 and 3 unacked, no 4th message is delivered until one is acked."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 10)
            inbox = s.nc.new_inbox()
            sub = await s.nc.subscribe(inbox)
            await s.jsm.add_consumer("C", durable_name="P", ack_policy=AckPolicy.EXPLICIT, deliver_subject=inbox,
                                     max_ack_pending=3)
            msgs = [await sub.next_msg(timeout=5) for _ in range(3)]
            assert seqs(msgs) == [1, 2, 3]
            info = await s.jsm.consumer_info("C", "P")
            assert (info.delivered.stream_seq, info.num_ack_pending, info.num_pending) == (3, 3, 7)
            await round_trip(s.nc)
            assert sub.pending_msgs == 0
            await msgs[0].ack()
            [fourth] = [await sub.next_msg(timeout=5)]
            assert fourth.metadata.sequence.stream == 4
            info = await s.jsm.consumer_info("C", "P")
            assert (info.delivered.stream_seq, info.num_ack_pending) == (4, 3)

            # Pull: a batch of 10 returns only what fits under the limit.
            psub = await durable_pull(s, "Q", max_ack_pending=3)
            got = await psub.fetch(10, timeout=1)
            assert seqs(got) == [1, 2, 3]

    run(scenario)


# --------------------------------------------------------------------------- delivery


def test_deliver_policies(js_server):
    """all, last, new, by_start_sequence, by_start_time and last_per_subject."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 6, subjects=("c.a", "c.b", "c.c"))  # a b c a b c

            async def first_batch(name: str, **cfg) -> list[int]:
                await s.jsm.add_consumer("C", durable_name=name, ack_policy=AckPolicy.EXPLICIT, **cfg)
                psub = await s.js.pull_subscribe_bind(name, stream="C")
                try:
                    return seqs(await psub.fetch(10, timeout=0.5))
                except asyncio.TimeoutError:
                    # nats.errors.TimeoutError, or a bare asyncio.TimeoutError when the 0.5 s
                    # run out between nats-py's no-wait probe and its waiting request (a busy
                    # machine; nats-py js/client.py _fetch_n)
                    return []

            assert await first_batch("ALL", deliver_policy=DeliverPolicy.ALL) == [1, 2, 3, 4, 5, 6]
            assert await first_batch("LAST", deliver_policy=DeliverPolicy.LAST) == [6]
            assert await first_batch("SEQ", deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                     opt_start_seq=4) == [4, 5, 6]
            assert await first_batch("LPS", deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                                     filter_subject="c.>") == [4, 5, 6]
            assert await first_batch("LPSA", deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                                     filter_subject="c.a") == [4]
            assert await first_batch("NEW", deliver_policy=DeliverPolicy.NEW) == []
            msg5 = await s.jsm.get_msg("C", 5)
            assert await first_batch("TIME", deliver_policy=DeliverPolicy.BY_START_TIME,
                                     opt_start_time=msg5.time.isoformat().replace("+00:00", "Z")) == [5, 6]

            info = await s.jsm.consumer_info("C", "NEW")
            assert (info.num_pending, info.delivered.stream_seq) == (0, 6)
            await s.js.publish("c.a", b"new")
            psub = await s.js.pull_subscribe_bind("NEW", stream="C")
            assert seqs(await psub.fetch(1, timeout=5)) == [7]

            err = await api_error(s.jsm.add_consumer("C", durable_name="BAD", ack_policy=AckPolicy.EXPLICIT,
                                                     deliver_policy=DeliverPolicy.BY_START_SEQUENCE))
            assert error_triple(err) == (400, 10094, "consumer delivery policy is deliver by start sequence, "
                                                     "but optional start sequence is not set")
            # nats-server: last_per_subject needs a filter subject, even though ">" would do.
            err = await api_error(s.jsm.add_consumer("C", durable_name="BAD", ack_policy=AckPolicy.EXPLICIT,
                                                     deliver_policy=DeliverPolicy.LAST_PER_SUBJECT))
            assert error_triple(err) == (400, 10094, "consumer delivery policy is deliver last per subject, "
                                                     "but optional filter subject is not set")

    run(scenario)


def test_filter_subject_and_subjects(js_server):
    """filter_subject and filter_subjects select messages; num_pending counts only those."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 9, subjects=("c.a", "c.b", "c.x.y"))
            one = await s.jsm.add_consumer("C", durable_name="ONE", filter_subject="c.b")
            assert one.num_pending == 3
            many = await s.jsm.add_consumer("C", durable_name="MANY", filter_subjects=["c.a", "c.x.>"])
            assert many.num_pending == 6
            assert many.config.filter_subjects == ["c.a", "c.x.>"] and many.config.filter_subject is None
            wild = await s.jsm.add_consumer("C", durable_name="WILD", filter_subject="c.*")
            assert wild.num_pending == 6

            p1 = await s.js.pull_subscribe_bind("ONE", stream="C")
            got = await p1.fetch(10, timeout=1)
            assert seqs(got) == [2, 5, 8] and {m.subject for m in got} == {"c.b"}
            assert [m.metadata.num_pending for m in got] == [2, 1, 0]
            p2 = await s.js.pull_subscribe_bind("MANY", stream="C")
            assert seqs(await p2.fetch(10, timeout=1)) == [1, 3, 4, 6, 7, 9]
            p3 = await s.js.pull_subscribe_bind("WILD", stream="C")
            assert seqs(await p3.fetch(10, timeout=1)) == [1, 2, 4, 5, 7, 8]

            err = await api_error(s.jsm.add_consumer("C", durable_name="BAD", filter_subject="c.a",
                                                     filter_subjects=["c.b"]))
            assert error_triple(err) == (400, 10136, "consumer cannot have both FilterSubject and "
                                                     "FilterSubjects specified")
            err = await api_error(s.jsm.add_consumer("C", durable_name="BAD", filter_subjects=["c.>", "c.a"]))
            assert error_triple(err) == (400, 10138, "consumer subject filters cannot overlap")

    run(scenario)


# --------------------------------------------------------------------------- info and API


def test_consumer_create_response_exact(js_server):
    """CONSUMER.CREATE answers the defaulted config and zeroed state, raw."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 3)
            reply = await s.api("$JS.API.CONSUMER.CREATE.C.D", {
                "stream_name": "C", "config": {"durable_name": "D", "ack_policy": "explicit"}})
            assert reply["type"] == CONSUMER_CREATE_RESPONSE
            config = reply["config"]
            meta = config.pop("metadata")
            assert set(meta) == {"_nats.level", "_nats.req.level", "_nats.ver"}
            assert config == {"durable_name": "D", "name": "D", "deliver_policy": "all", "ack_policy": "explicit",
                              "ack_wait": 30 * NS, "max_deliver": -1, "replay_policy": "instant",
                              "max_waiting": 512, "max_ack_pending": 1000, "num_replicas": 0}
            assert reply["delivered"] == {"consumer_seq": 0, "stream_seq": 0}
            assert reply["ack_floor"] == {"consumer_seq": 0, "stream_seq": 0}
            assert (reply["num_ack_pending"], reply["num_redelivered"], reply["num_waiting"],
                    reply["num_pending"]) == (0, 0, 0, 3)
            assert (reply["stream_name"], reply["name"]) == ("C", "D")
            assert RFC3339.match(reply["created"]) and RFC3339.match(reply["ts"])
            assert set(reply) == {"type", "stream_name", "name", "created", "config", "delivered", "ack_floor",
                                  "num_ack_pending", "num_redelivered", "num_waiting", "num_pending", "ts"}

            # After a delivery, delivered carries last_active.
            [msg] = await next_request(s, "C", "D", {"batch": 1})
            info = await s.api("$JS.API.CONSUMER.INFO.C.D")
            assert info["type"] == "io.nats.jetstream.api.v1.consumer_info_response"
            assert set(info["delivered"]) == {"consumer_seq", "stream_seq", "last_active"}
            assert RFC3339.match(info["delivered"]["last_active"])
            assert (info["num_ack_pending"], info["num_pending"]) == (1, 2)

            # Errors: name mismatch, changing the ack policy, missing stream.
            reply = await s.api("$JS.API.CONSUMER.CREATE.C.D", {
                "stream_name": "C", "config": {"durable_name": "Z", "ack_policy": "explicit"}})
            assert reply["error"] == {"code": 400, "err_code": 10017,
                                      "description": "consumer name in subject does not match durable name in request"}
            reply = await s.api("$JS.API.CONSUMER.CREATE.C.D", {
                "stream_name": "C", "config": {"durable_name": "D", "ack_policy": "none"}})
            assert reply["error"] == {"code": 500, "err_code": 10012, "description": "ack policy can not be updated"}
            reply = await s.api("$JS.API.CONSUMER.CREATE.NOPE.D", {
                "stream_name": "NOPE", "config": {"durable_name": "D", "ack_policy": "explicit"}})
            assert reply["error"] == {"code": 404, "err_code": 10059, "description": "stream not found"}

    run(scenario)


def test_consumer_info_counters(js_server):
    """consumer_info: num_pending, num_ack_pending, num_redelivered, ack_floor, delivered."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 6)
            psub = await durable_pull(s, "D")
            msgs = await psub.fetch(4, timeout=5)
            await msgs[0].ack_sync()
            await msgs[1].ack_sync()
            await msgs[3].nak()
            # The nak and the next pull request race inside the server, so seq 4 (again),
            # 5 and 6 may come in any order: ask for all three.
            more = await fetch_all(psub, 3)
            assert sorted(seqs(more)) == [4, 5, 6]
            [re] = [m for m in more if m.metadata.sequence.stream == 4]
            assert re.metadata.num_delivered == 2
            info = await s.jsm.consumer_info("C", "D")
            assert (info.stream_name, info.name) == ("C", "D")
            assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (7, 6)
            assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (2, 2)
            assert (info.num_pending, info.num_ack_pending, info.num_redelivered) == (0, 4, 1)
            assert info.num_waiting == 0
            for m in [msgs[2], *more]:
                await m.ack_sync()
            info = await s.jsm.consumer_info("C", "D")
            assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (7, 6)
            # nats-server: num_redelivered counts pending redeliveries, so acking drops it to 0.
            assert (info.num_pending, info.num_ack_pending, info.num_redelivered) == (0, 0, 0)

    run(scenario)


def test_msg_metadata_and_ack_subject(js_server):
    """msg.metadata and the $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> reply."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 3)
            before = datetime.datetime.now(datetime.timezone.utc)
            await s.js.publish("c.z", b"stamped")
            psub = await s.js.pull_subscribe("c.>", durable="META")
            msgs = await psub.fetch(4, timeout=5)
            last = msgs[3]
            md = last.metadata
            assert (md.stream, md.consumer) == ("C", "META")
            assert (md.sequence.stream, md.sequence.consumer, md.num_delivered, md.num_pending) == (4, 4, 1, 0)
            assert md.domain is None
            assert abs((md.timestamp - before).total_seconds()) < 5

            tokens = last.reply.split(".")
            assert len(tokens) == 9
            assert tokens[:7] == ["$JS", "ACK", "C", "META", "1", "4", "4"]
            assert tokens[8] == "0"
            # The timestamp token is the message's store time in Unix nanoseconds.
            stored = await s.jsm.get_msg("C", 4)
            # (nats-py parses the stored time to microseconds only.)
            assert abs(int(tokens[7]) - _unix_ns(stored.time)) < 1000
            assert [m.reply.split(".")[8] for m in msgs] == ["3", "2", "1", "0"]

            await msgs[0].nak()
            [again] = await psub.fetch(1, timeout=5)
            assert again.reply.split(".")[2:7] == ["C", "META", "2", "1", "5"]

    run(scenario)


def _unix_ns(t: datetime.datetime) -> int:
    """Unix nanoseconds of an aware datetime (microsecond precision)."""
    return int(t.timestamp()) * NS + t.microsecond * 1000


def test_add_delete_list_consumers(js_server):
    """add_consumer / consumers_info / CONSUMER.NAMES / delete_consumer."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 2)
            for name in ["zed", "alpha", "mid"]:
                info = await s.jsm.add_consumer("C", durable_name=name, ack_policy=AckPolicy.EXPLICIT)
                assert (info.name, info.stream_name, info.config.durable_name) == (name, "C", name)
            infos = await s.jsm.consumers_info("C")
            assert sorted(i.name for i in infos) == ["alpha", "mid", "zed"]
            names = await s.api("$JS.API.CONSUMER.NAMES.C")
            assert names == {"type": "io.nats.jetstream.api.v1.consumer_names_response", "total": 3, "offset": 0,
                             "limit": 1024, "consumers": ["alpha", "mid", "zed"]}
            listed = await s.api("$JS.API.CONSUMER.LIST.C")
            assert (listed["type"], listed["total"], listed["limit"]) == (
                "io.nats.jetstream.api.v1.consumer_list_response", 3, 256)
            stream = await s.jsm.stream_info("C")
            assert stream.state.consumer_count == 3

            assert await s.jsm.delete_consumer("C", "mid") is True
            err = await api_error(s.jsm.delete_consumer("C", "mid"))
            assert error_triple(err) == CONSUMER_NOT_FOUND
            reply = await s.api("$JS.API.CONSUMER.DELETE.C.mid")
            assert reply == {"type": "io.nats.jetstream.api.v1.consumer_delete_response",
                             "error": {"code": 404, "err_code": 10014, "description": "consumer not found"}}
            assert sorted(i.name for i in await s.jsm.consumers_info("C")) == ["alpha", "zed"]
            assert (await s.jsm.stream_info("C")).state.consumer_count == 2
            # Deleting the stream takes its consumers along.
            await s.jsm.delete_stream("C")
            await s.jsm.add_stream(name="C", subjects=["c.>"])
            assert await s.jsm.consumers_info("C") == []

    run(scenario)


def test_ephemeral_inactive_threshold(js_server):
    """An ephemeral consumer with inactive_threshold and no interest is removed."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            info = await s.jsm.add_consumer("C", ack_policy=AckPolicy.EXPLICIT, inactive_threshold=0.3)
            assert info.config.durable_name is None and info.name
            assert info.config.inactive_threshold == 0.3
            durable = await s.jsm.add_consumer("C", durable_name="KEEP", ack_policy=AckPolicy.EXPLICIT)
            assert durable.config.inactive_threshold is None

            async def gone() -> bool:
                try:
                    await s.jsm.consumer_info("C", info.name)
                except NotFoundError:
                    return True
                return False

            await apoll(gone, "the inactive ephemeral consumer to go away", 5, retry_on=())
            assert [c.name for c in await s.jsm.consumers_info("C")] == ["KEEP"]

    run(scenario)


def test_consumer_with_config_object(js_server):
    """add_consumer with a ConsumerConfig round-trips durations, description and limits."""

    async def scenario():
        async with js_session(js_server.url) as s:
            await stream_with(s, 1)
            cfg = ConsumerConfig(durable_name="CFG", description="d", ack_policy=AckPolicy.EXPLICIT, ack_wait=2.5,
                                 max_deliver=5, max_waiting=16, max_ack_pending=7, filter_subject="c.a")
            info = await s.jsm.add_consumer("C", cfg)
            c = info.config
            assert (c.description, c.ack_wait, c.max_deliver, c.max_waiting, c.max_ack_pending) == (
                "d", 2.5, 5, 16, 7)
            raw = await s.api("$JS.API.CONSUMER.INFO.C.CFG")
            assert raw["config"]["ack_wait"] == 2_500_000_000

    run(scenario)
